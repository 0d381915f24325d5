package kubeletsim

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// One test per rule of /work/shared/specs/kubelet-static-pods.md.

func TestHiddenFileIgnored(t *testing.T) {
	b := newBed(t, nil)
	// A complete, valid pod under a hidden name: the staging name of an
	// atomic write. Neither its inotify events nor a relist run it.
	b.write(".kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	b.write("marker.yaml", podYAML(podOpts{name: "marker"}))
	b.waitRunning(key("marker"), nil) // events are handled in order: the hidden file's came first
	b.relist()
	if ps := Find(b.k.Pods(), key("kube-scheduler")); len(ps) != 0 {
		t.Fatalf("hidden file yielded a pod: %+v", ps)
	}
	// The atomic write's rename makes the visible file, which does run.
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	if p := b.waitRunning(key("kube-scheduler"), nil); p.File != b.path("kube-scheduler.yaml") {
		t.Fatalf("pod from %s, want kube-scheduler.yaml", p.File)
	}
}

func TestDirectoryNotRecursed(t *testing.T) {
	b := newBed(t, nil)
	sub := filepath.Join(b.dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "kube-scheduler.yaml"), []byte(podYAML(podOpts{name: "kube-scheduler"})), 0o644); err != nil {
		t.Fatal(err)
	}
	b.write("marker.yaml", podYAML(podOpts{name: "marker"}))
	b.waitRunning(key("marker"), nil)
	b.relist()
	if len(b.k.Pods()) != 1 {
		t.Fatalf("pods %+v: want only the marker (no recursion into sub/)", b.k.Pods())
	}
}

func TestNotAPodIsLoggedAndSkipped(t *testing.T) {
	b := newBed(t, nil)
	// No extension filter: README and an AdmissionConfiguration are parsed
	// as pods, fail, and yield nothing; the pod beside them still runs.
	b.write("README", "these are the control plane manifests\n")
	b.write("admission.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins: []\n")
	b.write("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	b.waitRunning(key("kube-scheduler"), nil)
	b.relist()
	if len(b.k.Pods()) != 1 {
		t.Fatalf("pods %+v: want only kube-scheduler", b.k.Pods())
	}
}

func TestStagingLeftoverTakesPodOver(t *testing.T) {
	// The leftover exists when the stand-in starts, so the first relist
	// decides: kube-scheduler.yaml.tmp sorts after kube-scheduler.yaml.
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	real := podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"v": "real"}})
	left := podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"v": "leftover"}})
	for name, c := range map[string]string{"kube-scheduler.yaml": real, "kube-scheduler.yaml.tmp": left} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := newBed(t, func(c *Config) { c.ManifestDir = dir; c.RelistInterval = time.Hour })
	b.dir = dir
	if p := b.waitRunning(key("kube-scheduler"), nil); p.File != b.path("kube-scheduler.yaml.tmp") {
		t.Fatalf("relist: pod from %s, want the leftover kube-scheduler.yaml.tmp", p.File)
	}
	// An event on the real file takes the key back...
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"v": "real2"}}))
	b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.File == b.path("kube-scheduler.yaml") })
	// ...until the next relist hands it to the leftover again: the pod flaps.
	b.relist()
	b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.File == b.path("kube-scheduler.yaml.tmp") })
	if n := len(b.starts(key("kube-scheduler"))); n != 3 {
		t.Fatalf("%d starts, want 3 (leftover, real, leftover): each flip is a kill and a start", n)
	}
}

func TestAnnotationChangeRestartsAfterOldIsGone(t *testing.T) {
	b := newBed(t, nil)
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	old := b.waitRunning(key("kube-scheduler"), nil)
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"stratum.ciq.com/restarted-at": "2026-12-02T13:00:00Z"}}))
	nw := b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.UID != old.UID })
	if nw.PID == old.PID {
		t.Fatalf("same pid %d after an annotation change", nw.PID)
	}
	if alive(old.PID) {
		t.Fatalf("old process %d still alive", old.PID)
	}
	// The decision log proves the order: old reaped, old pod terminated,
	// then (after being held back) the new start.
	h := b.k.History()
	idx := func(kind, uid string) int {
		return slices.IndexFunc(h, func(e Event) bool { return e.Kind == kind && e.UID == uid })
	}
	exitOld, termOld, held, startNew := idx(EventExit, old.UID), idx(EventTerminated, old.UID), idx(EventHeld, nw.UID), idx(EventStart, nw.UID)
	if exitOld < 0 || termOld < 0 || held < 0 || startNew < 0 {
		t.Fatalf("missing events (exit %d, terminated %d, held %d, start %d) in %+v", exitOld, termOld, held, startNew, h)
	}
	if !(exitOld < termOld && termOld < startNew && held < startNew) {
		t.Fatalf("order exit=%d terminated=%d held=%d start=%d: the new pod started before the old was gone", exitOld, termOld, held, startNew)
	}
}

func TestUnchangedPodDoesNotRestart(t *testing.T) {
	b := newBed(t, nil)
	content := podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"a": "1"}, args: []string{"--x=1"}})
	b.write("kube-scheduler.yaml", content)
	first := b.waitRunning(key("kube-scheduler"), nil)
	// Identical bytes (non-atomic rewrite: modify events), then a change of
	// whitespace, comments and key order only.
	reordered := "# a comment\nkind: Pod\napiVersion: v1\n" + strings.Replace(strings.TrimPrefix(content, "apiVersion: v1\nkind: Pod\n"), "  name: kube-scheduler\n  namespace: kube-system\n", "  namespace:   kube-system\n  name: kube-scheduler   # trailing comment\n", 1) + "\n\n"
	for i, c := range []string{content, reordered} {
		n := b.handled()
		b.write("kube-scheduler.yaml", c)
		b.waitFor("the write's events", func([]PodStatus) bool { return b.handled() > n })
		b.relist()
		p := b.waitRunning(key("kube-scheduler"), nil)
		if p.UID != first.UID || p.PID != first.PID {
			t.Fatalf("write %d: pod uid %s pid %d, want unchanged uid %s pid %d", i, p.UID, p.PID, first.UID, first.PID)
		}
	}
	if n := len(b.starts(key("kube-scheduler"))); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
}

func TestParseErrorKeepsPodUntilRelist(t *testing.T) {
	b := newBed(t, func(c *Config) { c.RelistInterval = time.Hour })
	b.relist()
	b.write("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	old := b.waitRunning(key("kube-scheduler"), nil)
	n := b.handled()
	b.writeAtomic("kube-scheduler.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [this is not\n")
	b.waitFor("the bad write's event", func([]PodStatus) bool { return b.handled() > n })
	if p := b.waitRunning(key("kube-scheduler"), nil); p.PID != old.PID {
		t.Fatalf("pod replaced on a parse error event: pid %d, want %d still running", p.PID, old.PID)
	}
	b.relist()
	b.waitGone(key("kube-scheduler"))
	if alive(old.PID) {
		t.Fatalf("process %d alive after the relist dropped its pod", old.PID)
	}
}

func TestRemovalKills(t *testing.T) {
	cases := []struct {
		name, image string
		wantSignal  string
	}{
		{"sigterm", imgRun, "terminated"},
		{"sigkill after grace", imgIgnoreTerm, "killed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, nil)
			b.write("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", image: tc.image, grace: 1}))
			p := b.waitRunning(key("kube-scheduler"), nil)
			b.record(p.PID) // the program is past its start-up
			b.remove("kube-scheduler.yaml")
			b.waitGone(key("kube-scheduler"))
			if alive(p.PID) {
				t.Fatalf("process %d alive after removal", p.PID)
			}
			var exit *Event
			for _, e := range b.k.History() {
				if e.Kind == EventExit && e.PID == p.PID {
					exit = &e
				}
			}
			if exit == nil || !strings.Contains(exit.Detail, "signal="+tc.wantSignal) {
				t.Fatalf("exit event %+v, want signal %s", exit, tc.wantSignal)
			}
		})
	}
}

func TestCrashLoopBackoffGrows(t *testing.T) {
	b := newBed(t, nil)
	b.write("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", image: imgExit1}))
	b.waitFor("six restarts", func(st []PodStatus) bool {
		ps := Find(st, key("kube-scheduler"))
		return len(ps) == 1 && ps[0].Restarts >= 6
	})
	b.remove("kube-scheduler.yaml")
	b.waitGone(key("kube-scheduler"))
	var backoffs []time.Duration
	var starts []time.Time
	for _, e := range b.k.History() {
		switch e.Kind {
		case EventBackoff:
			backoffs = append(backoffs, e.Backoff)
		case EventStart:
			starts = append(starts, e.Time)
		}
	}
	// base 50ms, cap 400ms: immediate, then 50, 100, 200, 400, 400.
	want := []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}
	if len(backoffs) < len(want) || !slices.Equal(backoffs[:len(want)], want) {
		t.Fatalf("backoffs %v, want prefix %v", backoffs, want)
	}
	// Each restart waited at least its backoff since the previous start.
	for i := 1; i < len(want) && i+1 < len(starts); i++ {
		if gap := starts[i+1].Sub(starts[i]); gap < want[i] {
			t.Errorf("restart %d came %s after the previous start, before its %s backoff", i+1, gap, want[i])
		}
	}
	if ps := b.k.Pods(); len(ps) != 0 {
		t.Fatalf("pods left: %+v", ps)
	}
}

// A container that ran longer than its backoff restarts at once, and the
// backoff still doubles: the history records each decision, elapsed or
// waited, so the growth is visible whatever the container's run time (a
// loaded machine makes a fast-exiting one run that long too).
func TestCrashLoopBackoffElapsedIsRecorded(t *testing.T) {
	b := newBed(t, nil)
	b.write("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", image: imgSlowExit1}))
	b.waitFor("four restarts", func(st []PodStatus) bool {
		ps := Find(st, key("kube-scheduler"))
		return len(ps) == 1 && ps[0].Restarts >= 4
	})
	b.remove("kube-scheduler.yaml")
	b.waitGone(key("kube-scheduler"))
	var backoffs []time.Duration
	for _, e := range b.k.History() {
		if e.Kind == EventBackoff {
			backoffs = append(backoffs, e.Backoff)
		}
	}
	// It runs 250ms: 50, 100 and 200 have elapsed by its exit; 400 is waited.
	want := []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	if len(backoffs) < len(want) || !slices.Equal(backoffs[:len(want)], want) {
		t.Fatalf("backoffs %v, want prefix %v", backoffs, want)
	}
}

func TestCommandEnvAndArgv0(t *testing.T) {
	b := newBed(t, nil)
	b.write("kube-apiserver.yaml", podYAML(podOpts{
		name:    "kube-apiserver",
		command: []string{"kube-apiserver", "--port=$(PORT)"},
		args:    []string{"--a=$(FOO)", "--b=$$(FOO)", "--c=$(UNDEFINED)", "--d=$(DERIVED)", "--e=$(FROM_IMAGE)", "--f=$FOO", "--g=$(FOO"},
		env:     [][2]string{{"FOO", "bar"}, {"PORT", "6443"}, {"DERIVED", "$(FOO)-x"}, {"OVERRIDDEN", "pod"}},
	}))
	p := b.waitRunning(key("kube-apiserver"), nil)
	rec := b.record(p.PID)
	wantArgv := []string{"kube-apiserver", "--port=6443", "--a=bar", "--b=$(FOO)", "--c=$(UNDEFINED)", "--d=bar-x", "--e=$(FROM_IMAGE)", "--f=$FOO", "--g=$(FOO"}
	if !slices.Equal(rec.Argv, wantArgv) {
		t.Fatalf("argv\n got %q\nwant %q", rec.Argv, wantArgv)
	}
	env := slices.Clone(rec.Env)
	slices.Sort(env)
	host, _ := os.Hostname()
	wantEnv := []string{"DERIVED=bar-x", "FOO=bar", "FROM_IMAGE=image", helperEnv + "=run", "KSIM_OUT=" + b.out, "OVERRIDDEN=pod", "PORT=6443",
		"PATH=" + DefaultPath, "HOSTNAME=" + host, "HOME=/"}
	slices.Sort(wantEnv)
	if !slices.Equal(env, wantEnv) {
		t.Fatalf("environment\n got %q\nwant %q (pod env over image env, the runtime's PATH/HOSTNAME/HOME, nothing of the stand-in's own)", env, wantEnv)
	}
}

func TestUnknownImageRetriedUntilMapped(t *testing.T) {
	b := newBed(t, nil)
	b.write("etcd.yaml", podYAML(podOpts{name: "etcd", image: "registry.k8s.io/etcd:9.9.9-0"}))
	b.waitFor("start failures", func(st []PodStatus) bool {
		ps := Find(st, key("etcd"))
		return len(ps) == 1 && ps[0].LastExit != nil && ps[0].LastExit.Reason == "ErrImageNeverPull"
	})
	m, err := LoadImageMap(b.images)
	if err != nil {
		t.Fatal(err)
	}
	m["registry.k8s.io/etcd:9.9.9-0"] = m[imgRun]
	if err := m.Save(b.images); err != nil {
		t.Fatal(err)
	}
	b.waitRunning(key("etcd"), nil)
}

func TestRevertedManifestRunsAgain(t *testing.T) {
	// A rollback puts back bytes whose UID was already killed once: the
	// pod must run again, not stay terminated.
	b := newBed(t, nil)
	a := podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"v": "a"}})
	b.writeAtomic("kube-scheduler.yaml", a)
	first := b.waitRunning(key("kube-scheduler"), nil)
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"v": "b"}}))
	b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.UID != first.UID })
	b.writeAtomic("kube-scheduler.yaml", a)
	back := b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.UID == first.UID })
	if back.PID == first.PID {
		t.Fatalf("reverted pod reports the first process %d", back.PID)
	}
}

func TestStopKillsEverything(t *testing.T) {
	b := newBed(t, nil)
	b.write("a.yaml", podYAML(podOpts{name: "a"}))
	b.write("b.yaml", podYAML(podOpts{name: "b", image: imgIgnoreTerm}))
	pa := b.waitRunning(key("a"), nil)
	pb := b.waitRunning(key("b"), nil)
	b.record(pb.PID)
	b.stop()
	b.stop = func() {}
	for _, pid := range []int{pa.PID, pb.PID} {
		if alive(pid) {
			t.Errorf("process %d alive after Run returned", pid)
		}
	}
}

func TestSymlinkFollowedHugeFileRejected(t *testing.T) {
	b := newBed(t, nil)
	outside := filepath.Join(t.TempDir(), "real-scheduler.yaml")
	if err := os.WriteFile(outside, []byte(podYAML(podOpts{name: "kube-scheduler"})), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, b.path("kube-scheduler.yaml")); err != nil {
		t.Fatal(err)
	}
	huge := podYAML(podOpts{name: "huge"}) + "#" + strings.Repeat("x", MaxManifestSize) + "\n"
	// Atomically: a plain write of this size is read mid-way by the
	// modify events, and a prefix that parses runs, as with kubelet.
	b.writeAtomic("huge.yaml", huge)
	b.waitRunning(key("kube-scheduler"), nil)
	b.relist()
	for _, e := range b.k.History() {
		if e.Key == key("huge") {
			t.Fatalf("a file over %d bytes yielded a pod: %+v", MaxManifestSize, e)
		}
	}
}

func TestNewUIDStartsWithFreshBackoff(t *testing.T) {
	b := newBed(t, nil)
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", image: imgExit1}))
	first := b.waitFor("a crash loop", func(st []PodStatus) bool {
		ps := Find(st, key("kube-scheduler"))
		return len(ps) == 1 && ps[0].Restarts >= 3
	})
	oldUID := Find(first, key("kube-scheduler"))[0].UID
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", image: imgExit1, annotations: map[string]string{"v": "2"}}))
	b.waitFor("the new pod's first restart", func(st []PodStatus) bool {
		ps := Find(st, key("kube-scheduler"))
		return len(ps) == 1 && ps[0].UID != oldUID && ps[0].Restarts >= 1
	})
	for _, e := range b.k.History() {
		if e.Kind == EventBackoff && e.UID != oldUID {
			if e.Backoff != 0 {
				t.Fatalf("the new pod's first restart waited %s: a new UID must start with a fresh backoff", e.Backoff)
			}
			return
		}
	}
	t.Fatal("no backoff decision recorded for the new pod")
}

// kubelet's delete event removes the key the deleted file last yielded,
// whichever file holds it now: sweeping a leftover that won the key kills
// the pod, and only the next relist (or an event on the real file) brings
// it back from the real manifest.
func TestRemovingTheWinningLeftoverKillsUntilRelist(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"kube-scheduler.yaml": "real", "kube-scheduler.yaml.tmp": "leftover"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"v": v}})), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := newBed(t, func(c *Config) { c.ManifestDir = dir; c.RelistInterval = time.Hour })
	b.dir = dir
	b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.File == b.path("kube-scheduler.yaml.tmp") })
	b.remove("kube-scheduler.yaml.tmp")
	b.waitGone(key("kube-scheduler"))
	b.relist()
	b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.File == b.path("kube-scheduler.yaml") })
}
