package engine

// Snapshot retention.

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/journal"
)

// prune applies snapshot retention; failures are logged, never fatal. It
// runs after every transaction that ends: committed, rolled back, or its
// rollback failed (seven failed rollbacks kept seven snapshots, each with
// its etcd backup).
func (e *Engine) prune() {
	if err := e.pruneChecked(); err != nil {
		e.log.Warn("snapshot retention: nothing more was removed", "err", err)
	}
}

// pruneChecked applies snapshot retention (snapshot.Root.Prune), protecting
// the open transaction's snapshot and the newest committed upgrade's (the
// one `rollback --last` restores). The protected ids are the transactions'
// own ids, each checked by trustOpen first: when the journal cannot be read,
// or either transaction holds a path or id the engine would not have written
// (an UntrustedJournalError), nothing is pruned, since what to protect is
// not known.
func (e *Engine) pruneChecked() error {
	protect := map[string]bool{}
	open, err := e.j.OpenTxn()
	if err != nil {
		return fmt.Errorf("snapshot retention: %w", err)
	}
	if open != nil {
		if _, err := e.trustOpen(open); err != nil {
			return fmt.Errorf("snapshot retention: open transaction: %w", err)
		}
		protect[open.ID] = true
	}
	// `rollback --last` needs the newest committed upgrade's snapshot, however
	// many failed attempts came after it.
	hist, err := e.j.History(0)
	if err != nil {
		return fmt.Errorf("snapshot retention: %w", err)
	}
	for i := range hist {
		t := &hist[i]
		if t.Phase == journal.PhaseCommitted && t.Kind == journal.KindUpgrade {
			if _, err := e.trustOpen(t); err != nil {
				return fmt.Errorf("snapshot retention: last committed upgrade: %w", err)
			}
			protect[t.ID] = true
			break
		}
	}
	removed, err := e.snaps.Prune(protect)
	for _, r := range removed {
		e.log.Info("snapshot removed by retention", "snapshot", r)
	}
	return err
}
