package engine

// Components that were down when a transaction began: a rollback restores
// their manifests but never demands that they come back, since they did
// not run before either.

import (
	"context"
	"slices"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// downBefore is the components of st's roster that do not answer now, as a
// transaction begins: each is asked up to three times, 200 ms apart (the
// soak's rule: one slow answer is not a component that is down). A
// rollback does not demand that these come back. None when nothing of the
// roster answers.
func (e *Engine) downBefore(ctx context.Context, st *nodestate.NodeState) []string {
	down := manifest.NamesFor(st)
	for try := 0; try < 3 && len(down) > 0 && ctx.Err() == nil; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Millisecond):
			}
		}
		down = slices.DeleteFunc(down, func(comp string) bool {
			t, err := manifest.Target(st, comp)
			return err != nil || e.procs.Active(ctx, t) // no target: nothing to ask
		})
	}
	if ctx.Err() != nil {
		return nil
	}
	if len(down) == len(manifest.NamesFor(st)) {
		// Nothing answers (kubelet or the runtime is down): a rollback
		// that demanded nothing would verify nothing and still say the
		// node runs what it ran before. It demands the roster, as it
		// always did, and a failure is the operator's to look at.
		return nil
	}
	if len(down) > 0 {
		e.log.Info("components not answering as the transaction begins; a rollback will not wait for them", "components", down)
	}
	return down
}

// wasDown reports whether comp did not answer when the transaction began.
func (r *run) wasDown(comp string) bool { return slices.Contains(r.txn.Down, comp) }

// rollbackDown is the rollback step of comp, which was down when the
// transaction began: its manifest restored (the restore wrote it already,
// unless a crash came between), no wait for kubelet to start it or for it
// to answer, and the step journaled done.
func (e *Engine) rollbackDown(r *run, comp, stamp string) error {
	if _, err := e.writeTarget(r, journal.PhaseRollingBack, comp, stamp); err != nil {
		return err
	}
	e.event(r.txn.ID, journal.PhaseRollingBack, "done", comp, "", comp+" did not answer before the transaction either: its manifest is restored, the rollback does not wait for it")
	return e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepDone, Component: comp})
}
