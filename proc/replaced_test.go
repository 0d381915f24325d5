package proc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTrackedCheck pins what WaitReplaced's checks read between two scans
// of the whole table: after an event, only the processes the last check
// found plus the ones the exec events named, by the same rule (started
// after the mark, zombies gone, unreadable entries unknown); a lost event,
// a failed read or a pause without events makes the next check scan the
// whole table again.
func TestTrackedCheck(t *testing.T) {
	const boot = "11111111-2222-3333-4444-555555555555"
	root := fakeRoot(t, nil)
	put := func(pid int, argv0 string, state byte, ticks uint64) {
		t.Helper()
		dir := filepath.Join(root, itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string]string{"cmdline": argv0 + "\x00--flag\x00", "stat": statLine(pid, "x", state, 1, ticks)} {
			p := filepath.Join(dir, name)
			os.Remove(p)
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := func(pid int) {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(root, itoa(pid))); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	w := &execWatch{fd: -1}
	tr := &tracked{s: s, t: Target{Name: "kube-scheduler", Binary: "/usr/local/bin/kube-scheduler"}, m: Mark{Ticks: 200, BootID: boot}, w: w, full: true}
	expect := func(label string, wantDone bool, wantStale ...int) {
		t.Helper()
		done, stale, err := tr.check()
		if err != nil {
			t.Fatalf("%s: check: %v", label, err)
		}
		if done != wantDone || !slices.Equal(pidsOf(stale), wantStale) {
			t.Fatalf("%s: done %v stale %v, want done %v stale %v", label, done, pidsOf(stale), wantDone, wantStale)
		}
	}

	put(10, "kube-scheduler", 'S', 100) // from before the mark
	put(11, "etcd", 'S', 100)
	expect("first check, a scan of the whole table", false, 10)

	// The old process exits; kubelet starts pid 12. Pid 13 started before
	// the mark and exec'd kube-scheduler since: stale all the same.
	gone(10)
	put(12, "/usr/local/bin/kube-scheduler", 'S', 300)
	put(13, "kube-scheduler", 'S', 150)
	w.found = []int{12, 13}
	expect("the execs of 12 and 13 named", false, 13)
	put(13, "kube-scheduler", 'Z', 150)
	expect("13 a zombie", true)

	// A process no event named is not read until the next scan of the
	// whole table, which a pause without events or lost events brings.
	put(14, "kube-scheduler", 'S', 50)
	expect("14 not named", true)
	w.lost = true
	expect("events lost: a scan of the whole table", false, 14)
	gone(14)
	expect("14 gone", true)

	// An unreadable entry is unknown: an error, and the next check scans
	// the whole table.
	tr.full = false
	if err := os.Remove(filepath.Join(root, "12", "stat")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "12", "stat"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.check(); err == nil || !strings.Contains(err.Error(), "has kube-scheduler been replaced") {
		t.Fatalf("check with pid 12's stat unreadable: %v, want an error", err)
	}
	if !tr.full {
		t.Fatal("a failed check does not make the next one scan the whole table")
	}
	// A table that vanished is unknown too, never "gone".
	tr.full = false
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.check(); err == nil {
		t.Fatal("check over a vanished table succeeded")
	}
}
