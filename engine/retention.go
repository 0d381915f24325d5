package engine

// Snapshot retention.

import (
	"path/filepath"

	"github.com/ciq/stratum-upgrade/journal"
)

// prune applies snapshot retention; failures are logged, never fatal.
func (e *Engine) prune() {
	keepIDs := map[string]bool{}
	if open, err := e.j.OpenTxn(); err == nil && open != nil {
		keepIDs[open.ID] = true
	}
	// `rollback --last` needs the newest committed upgrade's snapshot, however
	// many failed attempts came after it.
	if hist, err := e.j.History(0); err == nil {
		for _, t := range hist {
			if t.Phase == journal.PhaseCommitted && t.Kind == journal.KindUpgrade {
				keepIDs[filepath.Base(t.SnapshotDir)] = true
				break
			}
		}
	}
	removed, err := e.snaps.Prune(keepIDs)
	if err != nil {
		e.log.Warn("snapshot retention", "err", err)
	}
	for _, r := range removed {
		e.log.Info("snapshot removed by retention", "snapshot", r)
	}
}
