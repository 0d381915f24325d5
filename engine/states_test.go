package engine

import (
	"errors"
	"testing"

	"github.com/ciq/stratum-upgrade/journal"
)

func TestMove(t *testing.T) {
	ok := [][2]journal.Phase{
		{journal.PhasePlanned, journal.PhaseSnapshotted},
		{journal.PhaseSnapshotted, journal.PhaseApplying},
		{journal.PhaseSnapshotted, journal.PhaseVerifying}, // every step done before a crash
		{journal.PhaseApplying, journal.PhaseApplying},
		{journal.PhaseApplying, journal.PhaseVerifying},
		{journal.PhaseVerifying, journal.PhaseCommitted},
		{journal.PhaseRollingBack, journal.PhaseRollingBack},
		{journal.PhaseRollingBack, journal.PhaseRolledBack},
		{journal.PhaseRollingBack, journal.PhaseRollbackFailed},
	}
	for _, p := range []journal.Phase{journal.PhasePlanned, journal.PhaseSnapshotted, journal.PhaseApplying, journal.PhaseVerifying} {
		ok = append(ok, [2]journal.Phase{p, journal.PhaseRollingBack})
	}
	for _, c := range ok {
		if err := move(c[0], c[1]); err != nil {
			t.Errorf("move %s -> %s: %v", c[0], c[1], err)
		}
	}
	bad := [][2]journal.Phase{
		{journal.PhasePlanned, journal.PhaseApplying},
		{journal.PhasePlanned, journal.PhaseCommitted},
		{journal.PhaseApplying, journal.PhaseCommitted},
		{journal.PhaseRollingBack, journal.PhaseApplying},
		{journal.PhaseRollingBack, journal.PhaseCommitted},
		{journal.PhaseCommitted, journal.PhaseCommitted},
		{journal.PhaseCommitted, journal.PhaseRollingBack},
		{journal.PhaseRolledBack, journal.PhaseApplying},
		{"sideways", journal.PhaseApplying},
	}
	for _, c := range bad {
		if err := move(c[0], c[1]); !errors.Is(err, errBadTransition) {
			t.Errorf("move %s -> %s: %v, want errBadTransition", c[0], c[1], err)
		}
	}
	// Every open phase has its moves listed; no terminal phase has any.
	for _, p := range journal.Phases {
		if _, listed := transitions[p]; listed != p.Open() {
			t.Errorf("phase %s: listed in transitions %v, open %v", p, listed, p.Open())
		}
	}
}
