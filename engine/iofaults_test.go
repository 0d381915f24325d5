package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletmodel"
	"github.com/ciq/stratum-upgrade/internal/harness/lazyfs"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// The I/O-error matrix: an upgrade (etcd included) while one kind of I/O
// the engine does fails -- on the lazyfs mount the whole node lives on, so
// the failure comes from the kernel as a real one would -- or while /proc
// cannot be read, a stop times out, or kubelet does not act. Each must end
// committed, rolled back, or with the transaction left open and an error
// that says to resume; never closed with a manifest missing, never
// rollback-failed for an I/O error. Then the fault is cleared, resume
// runs, and the node must have converged.

// ioFault is one row of the matrix.
type ioFault struct {
	name string
	// rule, when set, is injected on the node's lazyfs mount.
	rule *lazyfs.Rule
	// arm, when set, sets a fault on the node that is not the file
	// system's; it returns the function that clears it.
	arm func(n *memNode) (clear func())
}

func ioFaults() []ioFault {
	type target struct {
		name string
		op   lazyfs.Op
		path string
	}
	targets := []target{
		{name: "manifest-write", op: lazyfs.OpWrite, path: "manifests/*"},
		{name: "manifest-fsync", op: lazyfs.OpFsync, path: "manifests*"},
		{name: "manifest-rename", op: lazyfs.OpRename, path: "manifests/*"},
		{name: "snapshot-copy", op: lazyfs.OpWrite, path: "state/snapshots/*/*"},
		{name: "journal-commit", op: lazyfs.OpFsync, path: "state/stratum.db"},
		{name: "etcd-backup", op: lazyfs.OpWrite, path: "state/snapshots/*etcd.db*"},
	}
	var out []ioFault
	for _, tg := range targets {
		for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EIO} {
			for _, times := range []int{1, 0} {
				how := "once"
				if times == 0 {
					how = "until-cleared"
				}
				r := lazyfs.Rule{Op: tg.op, Path: tg.path, Errno: errno, Times: times}
				out = append(out, ioFault{name: fmt.Sprintf("%s/%s/%s", tg.name, errnoName(errno), how), rule: &r})
			}
		}
	}
	return append(out,
		ioFault{name: "proc-unreadable", arm: func(n *memNode) func() {
			u := &unreadableProc{Kubelet: n.k}
			n.procs = u
			n.onEvent = func(ev Event) {
				if ev.Step == "write" && ev.Component == nodestate.ControllerManager {
					u.broken = true
				}
			}
			return func() { n.procs, n.onEvent = nil, nil }
		}},
		ioFault{name: "stop-times-out", arm: func(n *memNode) func() {
			// The upgrade fails at the scheduler; the rollback's etcd stop
			// times out after the manifest was removed.
			n.release = release(n.st, true, nodestate.Scheduler, "never-listen")
			n.store2 = stopFails{modelStore{n.store, n.k}}
			return func() { n.store2 = nil }
		}},
		ioFault{name: "kubelet-never-replaces", arm: func(n *memNode) func() {
			// kubelet never acts on the new kube-controller-manager (the
			// wait for it times out); it does act on the rollback's
			// removal (the stop before the restore) and its write.
			path := n.store.Path(nodestate.ControllerManager)
			n.k.Hold(path)
			n.onEvent = func(ev Event) {
				if ev.Step == "stop" && ev.Component == nodestate.ControllerManager {
					n.k.Release(path)
				}
			}
			return func() { n.k.Release(path); n.onEvent = nil }
		}},
	)
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.EIO:
		return "EIO"
	}
	return fmt.Sprint(int(e))
}

// unreadableProc is the model seen through a /proc that cannot be read
// once broken is set: every look fails as proc's do (an unknown, not an
// answer).
type unreadableProc struct {
	*kubeletmodel.Kubelet
	broken bool
}

func (u *unreadableProc) err() error {
	return &fs.PathError{Op: "open", Path: "/proc/1/stat", Err: syscall.EACCES}
}

func (u *unreadableProc) Mark() (proc.Mark, error) {
	if u.broken {
		return proc.Mark{}, u.err()
	}
	return u.Kubelet.Mark()
}

func (u *unreadableProc) PIDs(b string) ([]proc.Process, error) {
	if u.broken {
		return nil, u.err()
	}
	return u.Kubelet.PIDs(b)
}

// Of looks as PIDs does (the embedded model's Of would not fail).
func (u *unreadableProc) Of(t proc.Target) ([]proc.Process, error) { return u.PIDs(t.Binary) }

// Arm looks as PIDs does (the embedded model's Arm would not fail).
func (u *unreadableProc) Arm(t proc.Target) ([]proc.Process, error) { return u.PIDs(t.Binary) }

func (u *unreadableProc) WaitReplaced(ctx context.Context, t proc.Target, m proc.Mark, d time.Duration) error {
	if u.broken {
		return fmt.Errorf("waiting for %s to be replaced: timed out after %s; last failure: %w", t.Name, d, u.err())
	}
	return u.Kubelet.WaitReplaced(ctx, t, m, d)
}

func (u *unreadableProc) WaitActive(ctx context.Context, t proc.Target, d time.Duration) error {
	if u.broken {
		return fmt.Errorf("waiting for %s to answer: timed out after %s; last failure: %w", t.Name, d, u.err())
	}
	return u.Kubelet.WaitActive(ctx, t, d)
}

func (u *unreadableProc) WaitGone(ctx context.Context, t proc.Target, d time.Duration) error {
	if u.broken {
		return fmt.Errorf("waiting for %s to exit: timed out after %s; last failure: %w", t.Name, d, u.err())
	}
	return u.Kubelet.WaitGone(ctx, t, d)
}

func (u *unreadableProc) Replaced(t proc.Target, m proc.Mark) (bool, []proc.Process, error) {
	if u.broken {
		return false, nil, u.err()
	}
	return u.Kubelet.Replaced(t, m)
}

// ioCase runs one row: the upgrade with the fault armed, the invariant on
// what it left, the fault cleared, resume, and convergence. It returns the
// problems.
func ioCase(t *testing.T, f ioFault) []string {
	t.Helper()
	ctx := t.Context()
	fsys := lazyfs.MountT(t)
	n := newMemNodeAt(t, fsys.Mountpoint(), false)
	n.before = n.manifests()
	n.release = release(n.st, true, "", "")
	var inj *lazyfs.Injection
	clear := func() {}
	if f.rule != nil {
		inj = fsys.Inject(*f.rule)
	}
	if f.arm != nil {
		clear = f.arm(n)
	}
	var store Manifests = modelStore{n.store, n.k}
	if n.store2 != nil {
		store = n.store2
	}
	res, err := n.engineWith(store, nil).Run(ctx, n.release, nil)
	var bad []string
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if inj != nil && inj.Fired() == 0 {
		badf("the fault never fired (%s): the I/O it targets did not happen", inj)
	}
	t.Logf("with the fault: %s %v", res.Outcome, err)
	bad = append(bad, n.faultedEnd(res, err)...)
	fsys.Clear()
	clear()
	n.crash(false)
	res, err = n.engine(nil).Resume(ctx)
	t.Logf("resume: %s %v", res.Outcome, err)
	hist, herr := n.j.History(1)
	switch {
	case herr != nil:
		badf("history: %v", herr)
	case len(hist) == 0:
		// The transaction never began: nothing may have changed.
		if now := n.manifests(); !sameFiles(now, n.before) {
			badf("no transaction began, yet the manifest directory changed")
		}
	default:
		want := Outcome(hist[0].Phase)
		if want != Committed && want != RolledBack {
			badf("after resume the last transaction is %s (%s)", hist[0].Phase, hist[0].Reason)
			break
		}
		bad = append(bad, n.converged(want)...)
	}
	if len(bad) > 0 {
		t.Logf("engine events:\n%s\nmodel events:\n%s", strings.Join(n.events, "\n"), strings.Join(n.k.Events(), "\n"))
	}
	return bad
}

// faultedEnd checks how the run with the fault ended: committed or rolled
// back with every manifest of its roster in place, or open with an error
// that says so; never rollback-failed.
func (n *memNode) faultedEnd(res Result, err error) []string {
	var bad []string
	open, oerr := n.j.OpenTxn()
	switch {
	case oerr != nil:
		bad = append(bad, "open transaction: "+oerr.Error())
	case open != nil:
		if !errors.Is(err, ErrStillOpen) && !errors.Is(err, errFatalJournal) {
			bad = append(bad, fmt.Sprintf("the transaction is left open (%s) but the error does not say so: %v", open.Phase, err))
		}
	case res.Outcome == RollbackFailed:
		bad = append(bad, fmt.Sprintf("the fault ended the transaction rollback-failed: %s", res.Reason))
	case res.Outcome == Committed || res.Outcome == RolledBack:
		st, serr := n.j.NodeState()
		if serr != nil {
			return append(bad, serr.Error())
		}
		for _, comp := range manifest.NamesFor(st) {
			if _, rerr := n.store.Read(comp); rerr != nil {
				bad = append(bad, fmt.Sprintf("the transaction ended %s with %s's manifest unreadable: %v", res.Outcome, comp, rerr))
			}
		}
	}
	return bad
}

func sameFiles(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

// TestIOErrorMatrix runs every row of ioFaults (unless STRATUM_MATRIX=full,
// a sample: one row of each target, the errno and how long it lasts
// rotating, and every row that is not the file system's).
func TestIOErrorMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("I/O-error matrix: a FUSE mount per case")
	}
	t.Parallel() // beside the other matrices: most of a case is waiting
	all := ioFaults()
	s := newSampler("TestIOErrorMatrix")
	// A row's phase is its target (manifest-write, proc-unreadable...),
	// its "component" the errno and how long (EIO/once...).
	part := func(i int, which int) string {
		f := strings.SplitN(all[i].name, "/", 2)
		if which >= len(f) {
			return ""
		}
		return f[which]
	}
	var rows []ioFault
	for _, i := range s.pick("rows", len(all), func(i int) string { return part(i, 0) }, func(i int) string { return part(i, 1) }) {
		rows = append(rows, all[i])
	}
	s.logPicked(t, len(rows), len(all))
	var ok atomic.Int32
	// After every row: they run in parallel, each on a mount of its own.
	t.Cleanup(func() { t.Logf("io-errors %d/%d converged", ok.Load(), len(rows)) })
	for _, f := range rows {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			for _, p := range ioCase(t, f) {
				t.Error(p)
			}
			if !t.Failed() {
				ok.Add(1)
			}
		})
	}
}
