package engine

// snapshotted/applying -> verifying: one component at a time.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// apply: snapshotted/applying -> verifying. For each changed component in
// roster order: journal a mark, write its manifest, wait until kubelet
// replaced the process and the new one answers, journal the step done. The
// done record of one component and the mark of the next are one journal
// write (one fsync pair per step). A component journaled done whose
// manifest no longer holds its target (edited between a crash and resume)
// is stepped again.
func (e *Engine) apply(ctx context.Context, r *run) error {
	if err := e.forceEtcdSnapshot(ctx, r); err != nil {
		return err
	}
	var pending []journal.Record
	for _, comp := range r.txn.Changed {
		// A surge an earlier run began and did not finish goes first:
		// the step then resumes, or starts, without one.
		if err := e.clearSurge(ctx, r, journal.PhaseApplying, comp); err != nil {
			return err
		}
		mark, resumed := r.find(journal.PhaseApplying, journal.StepMark, comp)
		if _, done := r.find(journal.PhaseApplying, journal.StepDone, comp); done {
			on, err := e.targetOnDisk(r, journal.PhaseApplying, comp, mark.Stamp)
			if err != nil {
				return fmt.Errorf("%s: %w", comp, err)
			}
			if on {
				continue
			}
			e.log.Warn("a component's manifest was changed after its step; writing it again", "component", comp)
		}
		if !resumed {
			// Its images may have left the node since the pre-flight.
			if err := e.imagesBeforeStop(ctx, r, comp); err != nil {
				return err
			}
			// Before the mark: a refused gate leaves etcd unwritten, and
			// the rollback leaves its member alone. A stop of etcd is
			// gated as its replacement is.
			if err := e.gateBefore(ctx, r, journal.PhaseApplying, comp); err != nil {
				return err
			}
			if err := e.surgeFirst(ctx, r, comp, &pending); err != nil {
				return err
			}
			m, err := e.procs.Mark()
			if err != nil {
				return fmt.Errorf("%s: %w", comp, err)
			}
			mark = journal.Record{Phase: journal.PhaseApplying, Step: journal.StepMark, Component: comp, ProcMark: &m}
			if r.txn.Kind == journal.KindRollbackLast {
				// The retained snapshot's bytes would give the pod a UID
				// kubelet terminated in the upgrade; a fresh stamp does not.
				mark.Stamp = e.store.Stamp()
			}
			if err := e.append(r, journal.PhaseApplying, append(pending, mark)...); err != nil {
				return err
			}
			pending = nil
		} else if len(pending) > 0 {
			// The previous component was stepped again (its manifest was
			// edited after its done record); journal its new done now.
			if err := e.append(r, journal.PhaseApplying, pending...); err != nil {
				return err
			}
			pending = nil
		}
		if err := e.step(ctx, r, journal.PhaseApplying, comp, *mark.ProcMark, mark.Stamp, !resumed); err != nil {
			return err
		}
		if uid, ok := r.surged[comp]; ok {
			if err := e.surgeDown(ctx, r, comp, uid); err != nil {
				return err
			}
		}
		var ids []proc.Process
		if r.writes(comp) {
			var err error
			if ids, err = e.identity(r.to, comp); err != nil {
				return err
			}
		}
		pending = []journal.Record{{Phase: journal.PhaseApplying, Step: journal.StepDone, Component: comp, Processes: ids}}
		// The done record rides with the next write; a crash before it only
		// repeats this component's (idempotent) step.
		e.hit(fault.AfterStep.Of(comp))
	}
	if err := e.append(r, journal.PhaseVerifying, pending...); err != nil {
		return err
	}
	e.hit(fault.AfterApply)
	return nil
}

// step writes comp's target manifest and waits for kubelet to act on it.
// m is the mark journaled for the step; fresh says this run took it just
// now (else an earlier run did, and remark decides whether it stands).
func (e *Engine) step(ctx context.Context, r *run, p journal.Phase, comp string, m proc.Mark, stamp string, fresh bool) error {
	t0 := time.Now()
	st, at := r.to, fault.Step.Of
	if p == journal.PhaseRollingBack {
		st, at = r.from, fault.Step.InRollback
	}
	e.hit(at(fault.BeforeWrite, comp))
	if !fresh {
		var err error
		if m, err = e.remark(ctx, r, p, st, comp, m, stamp); err != nil {
			return err
		}
	} else if _, surged := r.surged[comp]; surged && p == journal.PhaseApplying {
		// A surge: the surge copy serves while kubelet replaces the old
		// pod from the write; nothing is stopped first.
	} else if r.writes(comp) {
		// The mark was journaled before the removal: from here until the
		// write no process of comp runs, so m stands (stop.go).
		if err := e.stopForWrite(ctx, r, p, st, []string{comp}, true); err != nil {
			return err
		}
	}
	e.hit(at(fault.AfterStop, comp))
	if err := e.procs.PastMark(ctx, m); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	wrote, err := e.writeTarget(r, p, comp, stamp)
	if err != nil {
		return err
	}
	if p != journal.PhaseRollingBack && !r.writes(comp) {
		// A stop: the manifest is gone; so must the process be.
		e.event(r.txn.ID, p, "write", comp, "", "removed "+comp+" manifest")
		e.hit(at(fault.AfterWrite, comp))
		return e.waitStopped(ctx, r, p, comp, t0)
	}
	e.event(r.txn.ID, p, "write", comp, "", writeMessage(p, comp, wrote))
	e.hit(at(fault.AfterWrite, comp))
	t, err := manifest.Target(st, comp)
	if err != nil {
		return err
	}
	// A start's component (a stopped one: a start, or the undo of a stop)
	// had no process to replace.
	verb, done := "replace", "replaced"
	if r.from.IsStopped(comp) && p != journal.PhaseRollingBack {
		verb, done = "start", "started"
	}
	newEtcd := comp == nodestate.Etcd && p != journal.PhaseRollingBack
	surgeUID, surged := r.surged[comp]
	surged = surged && p == journal.PhaseApplying
	if surged {
		// The surge pod's processes started before m; they are not the
		// ones replaced.
		t.NotPods = []string{surgeUID}
	}
	e.event(r.txn.ID, p, "wait-replaced", comp, "kubelet to "+verb+" "+comp, "waiting for kubelet to "+verb+" "+comp)
	if err := e.procs.WaitReplaced(ctx, t, m, e.dl.Replace); err != nil {
		return e.etcdSilent(r, p, newEtcd && fresh && wrote, e.waitFailed(comp, err))
	}
	if newEtcd {
		// A newer etcd runs on the data now; until it answers, a crash
		// leaves unknown whether it wrote (newerEtcdRan).
		if err := e.append(r, p, journal.Record{Phase: p, Step: journal.StepReplaced, Component: comp}); err != nil {
			return err
		}
	}
	e.hit(at(fault.AfterReplaced, comp))
	e.event(r.txn.ID, p, "wait-active", comp, describeActive(t), "waiting for the new "+describeActive(t))
	if surged {
		// Beside the surge copy on one port: only an answer from the
		// canonical pod's own process counts.
		if err := e.waitCanonicalActive(ctx, t); err != nil {
			return err
		}
	} else if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
		return e.etcdSilent(r, p, newEtcd && fresh && wrote, e.waitFailed(comp, err))
	}
	if newEtcd {
		// It answered: it ran on the data and wrote to it. From here on
		// a rollback keeps the data only within etcd's minor.
		if err := e.append(r, p, journal.Record{Phase: p, Step: journal.StepEtcdAnswered, Component: comp}); err != nil {
			return err
		}
		e.hit(fault.AfterEtcdAnswered)
	}
	if err := e.gateAfter(ctx, r, p, st, comp); err != nil {
		return err
	}
	r.steps = append(r.steps, StepTime{Component: comp, Phase: string(p), Elapsed: time.Since(t0)})
	e.event(r.txn.ID, p, "done", comp, "", fmt.Sprintf("%s %s and active (%.1fs)", comp, done, time.Since(t0).Seconds()))
	return nil
}

// etcdSilent journals, when watched, that the wait for the new etcd
// ended without an answer, and returns the wait's error. watched says
// this run took the step's mark, stopped the old etcd and wrote the
// manifest itself: no etcd of the new manifest ran unseen before the wait,
// and none answered during it, so none wrote to the data so far. A resumed
// step journals nothing (an earlier run may have seen an answer it did
// not journal), and a failed write leaves the rollback to assume the worst.
func (e *Engine) etcdSilent(r *run, p journal.Phase, watched bool, waitErr error) error {
	if !watched {
		return waitErr
	}
	if err := e.append(r, p, journal.Record{Phase: p, Step: journal.StepEtcdSilent, Component: nodestate.Etcd}); err != nil {
		e.log.Warn("could not journal that the new etcd never answered; a rollback will not keep its data", "err", err)
		return waitErr
	}
	e.hit(fault.AfterEtcdSilent)
	return waitErr
}

// remark returns the mark a step resumed from the journal waits with. The
// journaled mark m stands when comp's manifest already holds the step's
// target: the write happened before the interruption, and kubelet started
// (or will start) the component from it after m -- in this boot, or in a
// later one, where every process counts as after m. Otherwise the write
// never happened, a power cut undid it, or the file was edited since;
// whatever runs now runs other bytes and may have started after m (kubelet
// restarted it after a reboot, a liveness kill or an OOM kill) and would
// pass for the replacement. Then comp is stopped as a fresh step stops it
// (its manifest removed, if the interrupted run had not yet removed it;
// its processes waited out; the name released) and a fresh mark, with the
// same stamp, is journaled.
func (e *Engine) remark(ctx context.Context, r *run, p journal.Phase, st *nodestate.NodeState, comp string, m proc.Mark, stamp string) (proc.Mark, error) {
	on, err := e.targetOnDisk(r, p, comp, stamp)
	if err != nil {
		return m, fmt.Errorf("%s: %w", comp, err)
	}
	if on {
		return m, nil
	}
	// The step's stop is still to come (or under way): it checks the
	// images and passes the gate as a fresh step's does.
	if p != journal.PhaseRollingBack {
		if err := e.imagesBeforeStop(ctx, r, comp); err != nil {
			return m, err
		}
	}
	if err := e.resumeGate(ctx, r, p, comp); err != nil {
		return m, err
	}
	if p == journal.PhaseRollingBack || r.writes(comp) {
		if err := e.stopForWrite(ctx, r, p, st, []string{comp}, false); err != nil {
			return m, err
		}
	}
	fresh, err := e.procs.Mark()
	if err != nil {
		return m, fmt.Errorf("%s: %w", comp, err)
	}
	if err := e.append(r, p, journal.Record{Phase: p, Step: journal.StepMark, Component: comp, ProcMark: &fresh, Stamp: stamp}); err != nil {
		return m, err
	}
	return fresh, nil
}

// writes reports whether comp's step in an upgrade (or a rollback-last)
// writes a manifest: false when its target is no manifest at all.
func (r *run) writes(comp string) bool {
	tg, ok := r.txn.Target(comp)
	return !ok || len(tg.Manifest) > 0
}

// waitFailed is the error of comp's failed wait as the operator reads it. A
// *proc.WaitError names the component already; what only a developer reads
// (the mark's ticks and boot id, the processes' start ticks) goes to the
// debug log. Any other error gets the component's name in front.
func (e *Engine) waitFailed(comp string, err error) error {
	var we *proc.WaitError
	if errors.As(err, &we) {
		e.log.Debug("wait failed", "component", comp, "detail", we.Detail, "err", err)
		return err
	}
	return fmt.Errorf("%s: %w", comp, err)
}

// describeActive is what the wait for t to be active waits for: "etcd to
// answer http://127.0.0.1:2381/health", or for a component without a health
// endpoint (kube-vip) "kube-vip to run".
func describeActive(t proc.Target) string {
	if !proc.HasListener(t) {
		return t.Name + " to run"
	}
	return t.Name + " to answer " + t.Health
}

// writeMessage is the "write" event's message: what the step did to comp's
// manifest. A rollback's step usually finds the bytes the snapshot restore
// wrote already; so does a resumed step whose write came before the crash.
func writeMessage(p journal.Phase, comp string, wrote bool) string {
	switch {
	case wrote:
		return "wrote " + comp + " manifest"
	case p == journal.PhaseRollingBack:
		return "manifest put back by the snapshot restore"
	}
	return "manifest already written (before an interruption)"
}

// writeTarget writes the bytes comp's manifest must hold in phase p: in an
// upgrade the journaled target (derived files first); in a rollback-last the
// journaled target with the mark's restarted-at stamp (an empty target
// removes the manifest); in a rollback the snapshot's bytes with the
// journaled stamp, in the snapshot's mode.
//
// It reports whether it changed the manifest: false when the file already
// held those bytes (the restore wrote them, or the write came before a
// crash).
func (e *Engine) writeTarget(r *run, p journal.Phase, comp, stamp string) (bool, error) {
	if p == journal.PhaseRollingBack {
		want, mode, err := r.restored(comp, stamp)
		if err != nil {
			return false, err
		}
		if _, err := e.store.Sweep(); err != nil {
			return false, err
		}
		return e.store.PutMode(comp, want, mode)
	}
	want, err := r.want(comp, stamp)
	if err != nil {
		return false, err
	}
	if want == nil {
		return e.store.Remove(comp)
	}
	tg, _ := r.txn.Target(comp)
	for _, d := range tg.Derived {
		if _, err := manifest.WriteDerived(manifest.DerivedFile{Path: d.Path, Data: d.Data, Mode: d.Mode}); err != nil {
			return false, err
		}
	}
	if _, err := e.store.Sweep(); err != nil {
		return false, err
	}
	return e.store.Put(comp, want)
}

// want is the exact bytes comp's manifest must hold after its step of an
// upgrade or rollback-last (nil: no manifest), from the journaled target.
func (r *run) want(comp, stamp string) ([]byte, error) {
	tg, ok := r.txn.Target(comp)
	if !ok {
		return nil, fmt.Errorf("transaction %s has no target for %s: the journal is damaged", r.txn.ID, comp)
	}
	if len(tg.Manifest) == 0 || r.txn.Kind != journal.KindRollbackLast {
		return tg.Manifest, nil
	}
	// The retained snapshot's bytes would give the pod a UID kubelet
	// terminated in the upgrade; the mark's fresh stamp does not.
	return manifest.SetRestartedAt(tg.Manifest, stamp)
}

// restored is the bytes and mode comp's manifest must hold after a
// rollback: the snapshot's, with the restarted-at stamp.
func (r *run) restored(comp, stamp string) ([]byte, fs.FileMode, error) {
	if r.snap == nil {
		return nil, 0, fmt.Errorf("transaction %s: the rollback has no loaded snapshot", r.txn.ID)
	}
	for _, en := range r.snap.Index.Manifests() {
		if en.Component != comp {
			continue
		}
		b, _ := r.snap.Manifest(comp)
		out, err := manifest.SetRestartedAt(b, stamp)
		if err != nil {
			return nil, 0, fmt.Errorf("%s in snapshot %s: %w", comp, r.snap.Dir, err)
		}
		return out, en.Mode.Perm(), nil
	}
	return nil, 0, fmt.Errorf("snapshot %s holds no manifest of %s", r.snap.Dir, comp)
}

// targetOnDisk reports whether comp's manifest on disk already holds what
// writeTarget would write in phase p.
func (e *Engine) targetOnDisk(r *run, p journal.Phase, comp, stamp string) (bool, error) {
	have, err := e.store.Read(comp)
	if errors.Is(err, manifest.ErrNoManifest) {
		// A stop's target is no manifest at all.
		return p != journal.PhaseRollingBack && !r.writes(comp), nil
	}
	if err != nil {
		return false, err
	}
	if p == journal.PhaseRollingBack {
		want, _, err := r.restored(comp, stamp)
		if err != nil {
			return false, err
		}
		return bytes.Equal(have, want), nil
	}
	want, err := r.want(comp, stamp)
	if err != nil {
		return false, err
	}
	return want != nil && bytes.Equal(have, want), nil
}

// identity is comp's current processes, journaled with its step so the
// soak can tell whether kubelet replaced it again.
func (e *Engine) identity(st *nodestate.NodeState, comp string) ([]proc.Process, error) {
	t, err := manifest.Target(st, comp)
	if err != nil {
		return nil, err
	}
	ps, err := e.procs.Of(t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", comp, err)
	}
	return ps, nil
}
