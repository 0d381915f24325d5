package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/lazyfs"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// The power-loss matrix: the memory matrix's scenarios and points, with
// the whole node (manifest directory, state directory with the journal and
// the snapshots, etcd's data dir and its parent) on a lazyfs mount. At the
// point the engine dies, the power goes: everything the engine did not
// make durable is lost (file data not fsynced; creates, renames and
// unlinks whose directory was not fsynced), the node reboots, and resume
// must converge. TestPowerCutAtEveryIO cuts inside the I/O instead, at
// every change the engine makes to the file system, every other cut with
// a torn last write (a prefix of it kept, as a sector that reached the
// disk half written).

// powerCut is memCase's fault for a power loss on fsys: the journal is
// closed (the process is gone), the power goes, the model kubelet reboots,
// and the journal opens again. It returns what is wrong right after the
// boot, before resume: a visible staging file, a manifest that does not
// decode, a snapshot neither complete nor absent.
func powerCut(fsys *lazyfs.FS) func(n *memNode) []string {
	return func(n *memNode) []string {
		n.t.Helper()
		if err := n.j.Close(); err != nil {
			n.t.Fatal(err)
		}
		if err := fsys.PowerLoss(); err != nil {
			n.t.Fatal(err)
		}
		if err := n.k.Reboot(); err != nil {
			n.t.Fatal(err)
		}
		bad := n.afterBoot()
		n.openJournal() // fails the test if the journal does not open
		return bad
	}
}

// afterBoot is what must hold of the disk after any power loss.
func (n *memNode) afterBoot() []string {
	var bad []string
	entries, err := os.ReadDir(n.store.Dir())
	if err != nil {
		return []string{err.Error()}
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // kubelet ignores hidden files; the next write sweeps them
		}
		_, canonical := manifest.ManifestName(name)
		// A surge copy the cut left is stratum's own: resume removes it
		// (the scenarios' verify checks none is left).
		_, surge := manifest.SurgeComponent(name)
		if !canonical && !surge {
			bad = append(bad, "after the power loss the manifest directory holds "+name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(n.store.Dir(), name))
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if _, err := manifest.DecodePod(b); err != nil {
			bad = append(bad, fmt.Sprintf("after the power loss %s does not decode: %v", name, err))
		}
	}
	root := filepath.Join(n.root, "state", "snapshots")
	snaps, err := os.ReadDir(root)
	if err != nil && !os.IsNotExist(err) {
		return append(bad, err.Error())
	}
	for _, e := range snaps {
		if strings.HasPrefix(e.Name(), ".") || !e.IsDir() {
			continue // staging, or the etcd backup beside it
		}
		if _, err := snapshot.Load(filepath.Join(root, e.Name()), manifest.DerivedPaths(n.st)); err != nil {
			bad = append(bad, fmt.Sprintf("after the power loss snapshot %s is neither complete nor absent: %v", e.Name(), err))
		}
	}
	return bad
}

// TestPowerLossMatrix runs every point of the memory matrix's scenarios
// with a power cut (unless STRATUM_MATRIX=full, a sample: sample_test.go).
// (Torn writes are TestPowerCutAtEveryIO's: at the
// journaled points everything is durable already, which this shows.)
func TestPowerLossMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("power-loss matrix: a FUSE mount per case")
	}
	t.Parallel() // beside the other matrices: most of a case is waiting
	start := time.Now()
	var times caseTimes
	var mu sync.Mutex // guards lost and reverted
	var lost int64
	var reverted int
	// After every case: they run in parallel, each on a mount of its own.
	t.Cleanup(func() {
		t.Logf("%s, in %s; the power cuts lost %d bytes and reverted %d files or directories in all",
			&times, time.Since(start).Round(time.Millisecond), lost, reverted)
	})
	st := newMemNode(t).st
	s := newSampler("TestPowerLossMatrix")
	for _, sc := range memScenarios(st) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			// A point not on the path is a case too: the power goes after
			// the whole transaction.
			pts := s.points(sc.name, sc.points, nil)
			s.logPicked(t, len(pts), len(sc.points))
			for _, pt := range pts {
				t.Run(string(pt), func(t *testing.T) {
					t.Parallel()
					defer times.since(time.Now())
					fsys := lazyfs.MountT(t)
					n := newMemNodeAt(t, fsys.Mountpoint(), false)
					for _, p := range memCase(t, n, sc, pt, powerCut(fsys)) {
						t.Error(p)
					}
					st := fsys.Stats()
					mu.Lock()
					lost += st.LastLostBytes
					reverted += st.LastRevertedFiles + st.LastRevertedDirs
					mu.Unlock()
				})
			}
		})
	}
}

// The matrix's check sees what a power loss does to a store that does not
// make its writes durable: a manifest written without fsync and its
// directory not synced is back to its old bytes (or gone) after the cut.
func TestPowerLossLosesWhatIsNotDurable(t *testing.T) {
	fsys := lazyfs.MountT(t)
	n := newMemNodeAt(t, fsys.Mountpoint(), false)
	path := n.store.Path("kube-scheduler")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A rename without a directory fsync, as a careless writer does.
	tmp := path + ".careless"
	if err := os.WriteFile(tmp, []byte("not synced\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	powerCut(fsys)(n)
	now, err := os.ReadFile(path)
	if err != nil || string(now) != string(old) {
		t.Fatalf("after the cut: %q %v; want the old bytes back", now, err)
	}
}

// TestPowerCutAtEveryIO cuts the power inside the engine's I/O rather than
// at its journaled points: the n-th change the transaction makes to the
// file system (a write, an fsync, a create, a rename, an unlink...) is the
// last to reach the disk; every later one fails with EIO, as a device that
// went away does; then the power goes and the node reboots. Whatever n,
// the disk must pass afterBoot and resume must converge to the outcome the
// journal then holds (or, when the transaction never began, nothing may
// have changed). A run of a scenario first counts its changes; every n is
// a case. Unless STRATUM_MATRIX=full, a sample (sample_test.go): one cut
// in each stretch between two fault points the transaction passes (its
// phase: the point before it, without its component), so every part of
// the transaction loses its power once per run.
func TestPowerCutAtEveryIO(t *testing.T) {
	if testing.Short() {
		t.Skip("power cut at every I/O: a FUSE mount per case")
	}
	t.Parallel() // beside the other matrices: most of a case is waiting
	st := newMemNode(t).st
	s := newSampler("TestPowerCutAtEveryIO")
	for _, sc := range memScenarios(st) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			after := countChanges(t, sc)
			cuts := s.pick(sc.name, len(after), func(n int) string { return pointPhase(after[n]) }, func(n int) string { return pointComponent(after[n]) })
			t.Logf("%s makes %d changes to the file system; cutting after %d of them", sc.name, len(after), len(cuts))
			for _, n := range cuts {
				t.Run(fmt.Sprintf("after-%d", n), func(t *testing.T) {
					t.Parallel()
					for _, p := range cutCase(t, sc, n) {
						t.Error(p)
					}
				})
			}
		})
	}
}

// beforeAny is the phase of the changes a transaction makes before it
// passes its first fault point.
const beforeAny fault.Point = "before-after-begin"

// countChanges runs sc on a fresh node and returns, for each change the
// transaction made to the file system, in order, the last fault point it
// passed before that change (beforeAny for none).
func countChanges(t *testing.T, sc memScenario) []fault.Point {
	t.Helper()
	fsys := lazyfs.MountT(t)
	n := newMemNodeAt(t, fsys.Mountpoint(), false)
	if sc.setup != nil {
		sc.setup(t, n)
	}
	count := fsys.Inject(lazyfs.Rule{Op: lazyfs.OpMutate, Errno: syscall.EIO, After: 1 << 30})
	// passed[i] is the point passed before change i: a change seen after
	// the hook at p ran belongs to p's stretch.
	var passed []fault.Point
	last := beforeAny
	note := func() {
		for int64(len(passed)) < count.Seen() {
			passed = append(passed, last)
		}
	}
	hook := func(p fault.Point) { note(); last = p }
	if _, err := sc.run(t.Context(), n.engine(hook), n); err != nil && !errors.Is(err, ErrRolledBack) {
		t.Fatalf("%s without a cut: %v", sc.name, err)
	}
	note()
	return passed
}

// cutCase runs sc with the power cut after its after-th change.
func cutCase(t *testing.T, sc memScenario, after int) []string {
	t.Helper()
	fsys := lazyfs.MountOptsT(t, lazyfs.Options{TornLastWrite: after%2 == 1, Seed: uint64(after)})
	n := newMemNodeAt(t, fsys.Mountpoint(), false)
	if sc.setup != nil {
		sc.setup(t, n)
	}
	n.before = n.manifests()
	hist0, _ := n.j.History(0)
	fsys.Inject(lazyfs.Rule{Op: lazyfs.OpMutate, Errno: syscall.EIO, After: after})
	res, err := sc.run(t.Context(), n.engine(nil), n)
	t.Logf("with the cut: %s %v", res.Outcome, err)
	bad := powerCut(fsys)(n)
	fsys.Clear()
	res, err = n.engine(nil).Resume(t.Context())
	t.Logf("resume: %s %v", res.Outcome, err)
	hist, herr := n.j.History(0)
	switch {
	case herr != nil:
		bad = append(bad, "history: "+herr.Error())
	case len(hist) == len(hist0):
		if !sameFiles(n.manifests(), n.before) {
			bad = append(bad, "no transaction began, yet the manifest directory changed")
		}
	default:
		want := Outcome(hist[0].Phase)
		if want != Committed && want != RolledBack {
			bad = append(bad, fmt.Sprintf("after resume the last transaction is %s (%s)", hist[0].Phase, hist[0].Reason))
			break
		}
		bad = append(bad, n.converged(want)...)
	}
	if len(bad) > 0 {
		t.Logf("engine events:\n%s\nmodel events:\n%s", strings.Join(n.events, "\n"), strings.Join(n.k.Events(), "\n"))
	}
	return bad
}

// careless is the model's store with Put done the way a careless writer
// does it: in place, no fsync, no rename.
type careless struct{ modelStore }

func (c careless) Put(name string, b []byte) (bool, error) {
	return true, os.WriteFile(c.Path(name), b, 0o600)
}

// The power-cut cases can fail: an engine whose manifest writes are not
// durable commits, the power goes, and the check finds manifests that are
// not the committed render.
func TestPowerCutCatchesWritesThatAreNotDurable(t *testing.T) {
	fsys := lazyfs.MountT(t)
	n := newMemNodeAt(t, fsys.Mountpoint(), false)
	n.before = n.manifests()
	if res, err := n.engineWith(careless{modelStore{n.store, n.k}}, nil).Run(t.Context(), release(n.st, false, "", ""), nil); err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	bad := append(powerCut(fsys)(n), n.converged(Committed)...)
	// The lost write of a manifest removed first (remove-then-write) is
	// a missing or empty file; of one written over, the old bytes.
	found := strings.Join(bad, "\n")
	if !strings.Contains(found, "is not the render of the committed node state") && !strings.Contains(found, "has no manifest") && !strings.Contains(found, "does not decode") {
		t.Fatalf("the check missed the lost writes; it found:\n%s", strings.Join(bad, "\n"))
	}
}
