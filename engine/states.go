package engine

// The states of a transaction and the moves between them, in one place.
// docs/architecture.md draws this table; the driver (driver.go) runs it and
// every phase change goes through move, which refuses one not listed here.
//
//	planned      -> snapshotted (snapshot.go) | rolling-back
//	snapshotted  -> applying, verifying (apply.go) | rolling-back
//	applying     -> applying, verifying (apply.go) | rolling-back
//	verifying    -> committed (verify.go) | rolling-back
//	rolling-back -> rolling-back, rolled-back, rollback-failed (rollback.go)
//	committed, rolled-back, rollback-failed: terminal; the journal closes
//	the transaction in the same bbolt transaction that sets them.

import (
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/journal"
)

// transitions lists, for every open phase, the phases a transaction may
// move to next. Staying in a phase (a record appended) is always allowed.
var transitions = map[journal.Phase][]journal.Phase{
	journal.PhasePlanned:     {journal.PhaseSnapshotted, journal.PhaseRollingBack},
	journal.PhaseSnapshotted: {journal.PhaseApplying, journal.PhaseVerifying, journal.PhaseRollingBack},
	journal.PhaseApplying:    {journal.PhaseVerifying, journal.PhaseRollingBack},
	journal.PhaseVerifying:   {journal.PhaseCommitted, journal.PhaseRollingBack},
	journal.PhaseRollingBack: {journal.PhaseRolledBack, journal.PhaseRollbackFailed},
}

// errBadTransition marks a phase change the state machine does not have:
// a bug in the engine, or a journal edited by hand.
var errBadTransition = fmt.Errorf("phase change not in the state machine")

// move checks that a transaction in phase from may go to phase to.
func move(from, to journal.Phase) error {
	if from == to && from.Open() || slices.Contains(transitions[from], to) {
		return nil
	}
	return fmt.Errorf("%w: %s -> %s", errBadTransition, from, to)
}
