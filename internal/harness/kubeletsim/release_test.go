package kubeletsim

import (
	"slices"
	"testing"
	"time"
)

// TestNameReleaseDecidesTheHold pins the rule issue 18's replacement rests
// on, as the real kubelet has it (docs/kubelet-hold.md): a new static pod
// whose name an older pod still holds -- running, terminating, or
// terminated and not yet cleaned up -- is held StartDelay (plus jitter);
// the name is released Housekeeping after the old pod's last process was
// reaped, and a pod written after that starts at once.
func TestNameReleaseDecidesTheHold(t *testing.T) {
	const hold, release = 2 * time.Second, 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		// replace writes the new manifest over the old pod's, given the
		// old pod's pid.
		replace  func(b *bed, oldPID int)
		wantHeld bool
	}{
		{"in-place rewrite", func(b *bed, _ int) {}, true},
		{"removed, old process gone, written at once", func(b *bed, pid int) {
			b.remove("kube-scheduler.yaml")
			waitDead(t, pid)
		}, true},
		{"removed, written once the name is released", func(b *bed, pid int) {
			b.remove("kube-scheduler.yaml")
			waitDead(t, pid)
			b.waitFor("the old pod cleaned up", func(st []PodStatus) bool { return len(Find(st, key("kube-scheduler"))) == 0 })
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, func(c *Config) {
				c.StartDelay, c.StartJitter, c.Housekeeping = hold, -1, release
				c.GraceCap = 2 * time.Second
			})
			b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
			old := b.waitRunning(key("kube-scheduler"), nil)
			tc.replace(b, old.PID)
			written := time.Now()
			b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"stratum.ciq.com/restarted-at": "2026-12-03T12:00:00Z"}}))
			nw := b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.UID != old.UID })
			took := time.Since(written)
			held := slices.ContainsFunc(b.k.History(), func(e Event) bool { return e.Kind == EventHeld && e.UID == nw.UID })
			if held != tc.wantHeld {
				t.Fatalf("new pod held = %v, want %v (started %s after the write)", held, tc.wantHeld, took)
			}
			if tc.wantHeld && took < hold {
				t.Errorf("held pod started %s after the write, before the %s hold passed", took, hold)
			}
			if !tc.wantHeld && took >= hold {
				t.Errorf("pod written after the release started only %s after the write", took)
			}
		})
	}
}

// waitDead waits until process pid is gone (reaped or a zombie).
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after 10s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
