package engine

// rolling-back -> rolled-back | rollback-failed.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// rollback: rolling-back -> rolled-back or rollback-failed.
func (e *Engine) rollback(ctx context.Context, r *run) (Result, error) {
	reason := r.txn.Reason
	if err := e.rollbackSteps(ctx, r); err != nil {
		if missing := e.missingManifests(r); len(missing) > 0 && !errors.Is(err, errResumable) {
			// Closing the transaction now would leave the node without
			// these manifests and nothing to resume.
			err = fmt.Errorf("%w: %v; the manifest of %s is not in place", errResumable, err, strings.Join(missing, ", "))
		} else if isIOError(err) && !errors.Is(err, errResumable) {
			// A full disk or a failing device: the node is part restored,
			// and resume finishes the rollback once the I/O works.
			err = fmt.Errorf("%w: %w (fix the I/O error, then run resume)", errResumable, err)
		}
		if errors.Is(err, errFatalJournal) || errors.Is(err, errResumable) || ctx.Err() != nil {
			return r.result("", reason), fmt.Errorf("%w: the rollback of %s is paused: %v: %w", ErrInterrupted, r.txn.ID, err, ErrStillOpen)
		}
		detail := e.nodeReport(r)
		msg := fmt.Sprintf("%s; then the rollback failed: %v", reason, err)
		if ferr := e.j.Finish(r.txn.ID, journal.PhaseRollbackFailed, msg, detail); ferr != nil {
			return r.result("", msg), fmt.Errorf("rollback failed (%v) and could not be journaled (%v): %w", err, ferr, ErrStillOpen)
		}
		e.event(r.txn.ID, journal.PhaseRollbackFailed, "rollback-failed", "", "", msg)
		e.ended(r, RollbackFailed, msg)
		// Ended: retention runs as after any end (its snapshot is the
		// newest, and kept).
		e.prune()
		return r.result(RollbackFailed, msg), e.rollbackFailed(r, msg)
	}
	e.hit(fault.BeforeRolledBack)
	if err := e.j.Finish(r.txn.ID, journal.PhaseRolledBack, reason, nil); err != nil {
		return r.result("", reason), fmt.Errorf("the rollback is done but could not be journaled (%v): %w", err, ErrStillOpen)
	}
	r.txn.Phase = journal.PhaseRolledBack
	e.event(r.txn.ID, journal.PhaseRolledBack, "rolled-back", "", "", "rolled back: "+reason)
	e.ended(r, RolledBack, reason)
	e.prune()
	return r.result(RolledBack, reason), fmt.Errorf("%w: %s", ErrRolledBack, reason)
}

// rollbackFailed is the error of a failed rollback, with the facts of this
// node an operator needs: whether etcd's data was left aside.
func (e *Engine) rollbackFailed(r *run, msg string) error {
	rf := &RollbackFailedError{Txn: r.txn.ID, Reason: msg}
	data := filepath.Clean(r.from.Etcd.DataDir)
	aside := data + ".stratum-pre-rollback-" + r.txn.ID
	if _, err := os.Lstat(data); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(aside); err == nil {
			rf.EtcdDataDir, rf.EtcdAside = data, aside
		}
	}
	return rf
}

// missingManifests is the components of the node state rolled back to
// whose manifest is not on disk although the snapshot holds one (etcd's,
// removed to restore its data), in roster order. A rollback never ends
// with one missing: it stays open for resume.
func (e *Engine) missingManifests(r *run) []string {
	var out []string
	for _, comp := range manifest.NamesFor(r.from) {
		if r.snap != nil {
			if _, held := r.snap.Manifest(comp); !held {
				continue
			}
		}
		if _, err := e.store.Read(comp); errors.Is(err, manifest.ErrNoManifest) {
			out = append(out, comp)
		}
	}
	return out
}

// isIOError reports whether err comes from a failed file system call (a
// full disk, a failing device, a read-only remount, an unreadable /proc),
// not from a wait, a health probe or a check.
func isIOError(err error) bool {
	var (
		ne *net.OpError
		pe *fs.PathError
		le *os.LinkError
	)
	if errors.As(err, &ne) {
		return false
	}
	return errors.As(err, &pe) || errors.As(err, &le) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EDQUOT)
}

// errResumable marks a rollback failure that leaves the node in a state a
// later resume can continue from (an etcd data restore that failed on I/O):
// the transaction stays open instead of ending rollback-failed.
var errResumable = errors.New("resumable")

// written is the components the transaction wrote (or may have written: a
// mark is journaled before the write), in roster order. etcd's forced
// snapshot (StepEtcdSnapshot) writes etcd's manifest too.
func (r *run) written() []string {
	var out []string
	for _, comp := range r.txn.Changed {
		_, forced := r.find(journal.PhaseApplying, journal.StepEtcdSnapshot, comp)
		if _, ok := r.find(journal.PhaseApplying, journal.StepMark, comp); ok || forced {
			out = append(out, comp)
		}
	}
	return out
}

// restartSet is the components the rollback restarts, in roster order:
// those the transaction wrote, and after a restore of etcd's data the whole
// control plane, whose caches hold revisions the restored data does not.
func (r *run) restartSet(written []string) []string {
	_, etcdRestored := r.find(journal.PhaseRollingBack, journal.StepEtcdRestored, nodestate.Etcd)
	var out []string
	for _, comp := range manifest.NamesFor(r.from) {
		switch {
		case slices.Contains(written, comp):
		case etcdRestored && (comp == nodestate.KubeAPIServer || comp == nodestate.ControllerManager || comp == nodestate.Scheduler):
		default:
			continue
		}
		out = append(out, comp)
	}
	for _, comp := range written {
		if !slices.Contains(out, comp) {
			out = append(out, comp) // added by the upgrade: the restore removes it
		}
	}
	return out
}

func (e *Engine) rollbackSteps(ctx context.Context, r *run) error {
	written := r.written()
	if r.txn.SnapshotDir == "" {
		// Failed before the snapshot: nothing was written.
		if len(written) > 0 {
			return errors.New("journal has manifest writes but no snapshot")
		}
		e.snaps.CleanStaging(r.txn.ID)
		return nil
	}
	// A surge copy goes before anything is put back: the rollback's steps
	// replace stop-then-start.
	for _, comp := range r.txn.Changed {
		if err := e.clearSurge(ctx, r, journal.PhaseRollingBack, comp); err != nil {
			return err
		}
	}
	derived := manifest.DerivedPaths(r.from)
	// The whole snapshot is validated before anything moves, etcd included.
	snap, err := snapshot.Load(r.txn.SnapshotDir, derived)
	if err != nil {
		return err
	}
	r.snap = snap
	_, restored := r.find(journal.PhaseRollingBack, journal.StepRestored, "")
	if !restored {
		// Decided and journaled before anything stops etcd.
		data, err := e.decideEtcd(ctx, r, written, snap)
		if err != nil {
			return err
		}
		if data == journal.EtcdDowngrade {
			// The new etcd still runs: downgraded before it is stopped,
			// or the decision becomes restore.
			if data, err = e.downgradeEtcd(ctx, r); err != nil {
				return err
			}
		}
		if err := e.restoreEtcd(ctx, r, data == journal.EtcdRestore); err != nil {
			return err
		}
	}
	restart := r.restartSet(written)
	last, err := e.rollbackMarks(ctx, r, restart, restored)
	if err != nil {
		return err
	}
	if !restored {
		if err := e.restoreSnapshot(ctx, r, derived, restart, last); err != nil {
			return err
		}
	}
	for _, comp := range restart {
		if err := e.rollbackComponent(ctx, r, comp); err != nil {
			return err
		}
	}
	if err := e.endEnabledDowngrade(ctx, r); err != nil {
		return err
	}
	return e.verifyRolledBack(ctx, r)
}

// rollbackMarks journals, in one write, a mark and a stamp for every
// component the rollback restarts, and returns the latest mark: every
// process started after it is one kubelet started from the restored bytes.
// To make that hold, the components are stopped first (stopForWrite: the
// manifests removed, the pods' names released), so no pod of the replaced
// manifest can start after the mark (a crash loop, a reboot, a liveness
// restart), and the restored pod starts at once rather than 10-15 s later
// (docs/kubelet-hold.md). An earlier run's mark stands when the restore is
// journaled or the manifest already holds the stamped bytes; else the
// component is stopped and marked again, with the same stamp.
func (e *Engine) rollbackMarks(ctx context.Context, r *run, restart []string, restored bool) (proc.Mark, error) {
	var last proc.Mark
	stamps := map[string]string{}
	var fresh []string // to stop and mark, in roster order
	for _, comp := range restart {
		if _, held := r.snap.Manifest(comp); !held {
			continue
		}
		rec, ok := r.find(journal.PhaseRollingBack, journal.StepMark, comp)
		stamp := rec.Stamp
		if ok {
			on, err := e.targetOnDisk(r, journal.PhaseRollingBack, comp, rec.Stamp)
			if err != nil {
				return last, fmt.Errorf("%s: %w", comp, err)
			}
			if restored || on {
				last = *rec.ProcMark
				continue
			}
		} else {
			stamp = e.store.Stamp()
		}
		stamps[comp] = stamp
		fresh = append(fresh, comp)
	}
	if len(fresh) == 0 {
		return last, nil
	}
	if slices.Contains(fresh, nodestate.Etcd) {
		if err := e.gateBefore(ctx, r, journal.PhaseRollingBack, nodestate.Etcd); err != nil {
			return last, err
		}
	}
	if err := e.stopForWrite(ctx, r, journal.PhaseRollingBack, r.from, fresh, false); err != nil {
		return last, err
	}
	var marks []journal.Record
	for _, comp := range fresh {
		m, err := e.procs.Mark()
		if err != nil {
			return last, err
		}
		last = m
		marks = append(marks, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepMark, Component: comp, ProcMark: &m, Stamp: stamps[comp]})
	}
	return last, e.append(r, journal.PhaseRollingBack, marks...)
}

// restoreSnapshot writes the snapshot back, each restarted manifest with
// its journaled stamp, once the clock is past the last mark, and journals
// that it did.
func (e *Engine) restoreSnapshot(ctx context.Context, r *run, derived, restart []string, last proc.Mark) error {
	stamps := map[string]string{}
	for _, comp := range restart {
		if rec, ok := r.find(journal.PhaseRollingBack, journal.StepMark, comp); ok {
			stamps[comp] = rec.Stamp
		}
	}
	if err := e.procs.PastMark(ctx, last); err != nil {
		return err
	}
	e.event(r.txn.ID, r.txn.Phase, "restore", "", "", "restoring the manifest snapshot "+r.txn.SnapshotDir)
	res, err := snapshot.RestoreStamped(r.txn.SnapshotDir, e.store, derived, stamps)
	if err != nil {
		return err
	}
	if len(res.Strays) > 0 {
		e.log.Warn("snapshot holds files that were not restored", "strays", res.Strays)
	}
	e.hit(fault.AfterRestore)
	return e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepRestored})
}

// rollbackComponent waits for comp to come back from the restored bytes (or,
// when the upgrade added it, to go), and journals it done. A component
// journaled done whose manifest no longer holds the stamped snapshot bytes
// (edited between a crash and resume) is stepped again.
func (e *Engine) rollbackComponent(ctx context.Context, r *run, comp string) error {
	_, held := r.snap.Manifest(comp)
	if _, done := r.find(journal.PhaseRollingBack, journal.StepDone, comp); done {
		if !held {
			return nil
		}
		mark, _ := r.find(journal.PhaseRollingBack, journal.StepMark, comp)
		if on, err := e.targetOnDisk(r, journal.PhaseRollingBack, comp, mark.Stamp); err != nil || on {
			return err
		}
		e.log.Warn("a component's manifest was changed after its rollback step; writing it again", "component", comp)
	}
	if !held {
		// The upgrade added it; the restore removed it. Wait for it to go.
		t, err := manifest.Target(r.to, comp)
		if err != nil {
			return err
		}
		if err := e.procs.WaitGone(ctx, t, e.dl.Stop); err != nil {
			return fmt.Errorf("the upgrade added %s and the restore removed its manifest, but %w", comp, err)
		}
		return e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepDone, Component: comp})
	}
	mark, _ := r.find(journal.PhaseRollingBack, journal.StepMark, comp)
	if r.wasDown(comp) {
		return e.rollbackDown(r, comp, mark.Stamp)
	}
	// The restore wrote the stamped bytes already; the step's write is a
	// no-op unless a crash came between the restore and its record, or the
	// file was changed since (then remark takes a fresh mark).
	if err := e.step(ctx, r, journal.PhaseRollingBack, comp, *mark.ProcMark, mark.Stamp, false); err != nil {
		return err
	}
	ids, err := e.identity(r.from, comp)
	if err != nil {
		return err
	}
	e.hit(fault.AfterStep.InRollback(comp))
	return e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepDone, Component: comp, Processes: ids})
}

// verifyRolledBack verifies the rollback like an upgrade: every component
// of the old roster answers, then none is replaced again during the soak;
// but for those that did not answer when the transaction began.
func (e *Engine) verifyRolledBack(ctx context.Context, r *run) error {
	roster := slices.DeleteFunc(manifest.NamesFor(r.from), r.wasDown)
	for _, comp := range roster {
		t, err := manifest.Target(r.from, comp)
		if err != nil {
			return err
		}
		if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
			return fmt.Errorf("after the rollback, %w", err) // it names comp
		}
	}
	want := map[string][]proc.Process{}
	for _, comp := range roster {
		id, err := e.identity(r.from, comp)
		if err != nil {
			return err
		}
		want[comp] = id
	}
	e.event(r.txn.ID, r.txn.Phase, "verify", "", fmt.Sprintf("%s soak", e.dl.Soak), fmt.Sprintf("verifying the rolled-back components for %s", e.dl.Soak))
	return e.soak(ctx, r.from, roster, want)
}
