package engine

// Transactions begun by a binary of journal schema 1 carry no targets: that
// binary rendered each write from the node state when it made it. The first
// resume by this binary fixes them once, from the same inputs that binary
// would have used, and journals them before anything is written.

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// pinTargets computes and journals the targets of a transaction that has
// none: an upgrade's renders of its node state (each keeping the
// restarted-at on disk, as that binary's Store.Start did), or a
// rollback-last's retained snapshot bytes.
func (e *Engine) pinTargets(r *run) error {
	var targets []journal.Target
	switch r.txn.Kind {
	case journal.KindRollbackLast:
		snap, err := snapshot.Load(r.txn.Source, manifest.DerivedPaths(r.to))
		if err != nil {
			return err
		}
		for _, comp := range r.txn.Changed {
			b, _ := snap.Manifest(comp)
			targets = append(targets, journal.Target{Component: comp, Manifest: b})
		}
	default:
		prof, err := manifest.LoadProfile(r.to)
		if err != nil {
			return err
		}
		plan := &Plan{From: r.from, To: r.to}
		if plan.Derived, err = manifest.DerivedFiles(r.to, prof); err != nil {
			return err
		}
		for _, comp := range r.txn.Changed {
			stamp, err := e.store.RestartedAtOnDisk(comp)
			if err != nil {
				return err
			}
			b, err := manifest.RenderBytes(r.to, prof, comp, stamp)
			if err != nil {
				return err
			}
			plan.Changes = append(plan.Changes, Change{Component: comp, After: b})
		}
		targets = plan.Targets()
	}
	if err := e.j.Update(r.txn.ID, func(t *journal.Txn) error {
		t.Targets = targets
		return nil
	}); err != nil {
		return fmt.Errorf("%w: pin the targets of a schema-1 transaction: %v", errFatalJournal, err)
	}
	r.txn.Targets = targets
	e.log.Info("pinned the targets of a transaction begun by an older stratum-upgrade", "txn", r.txn.ID, "components", len(targets))
	return nil
}
