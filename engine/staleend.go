package engine

// This node's record in the cluster left open for a transaction its
// journal ended: a begin whose write landed after the node read it back as
// not recorded and rolled back, or an end whose write failed. Every other
// node waits while the cluster shows it open, so the next command here that
// takes the rollout lock closes it with the journal's outcome.

import (
	"context"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/journal"
)

// closeStale closes this node's open record, under h, when its transaction
// is not resume (the one being driven again) and the journal ended it. It
// reports whether it closed one; a cluster or journal it cannot read is a
// warning only (the node itself needs nothing), and the record stays open.
func (e *Engine) closeStale(ctx context.Context, h *cluster.Hold, c *cluster.Coordinator, node, resume string) (bool, error) {
	p, err := c.Node(ctx, node)
	if err != nil {
		e.log.Warn("could not check that the cluster knows how this node's last transaction ended", "err", err)
		return false, nil
	}
	if p == nil || !p.Open() || p.Txn == resume {
		return false, nil
	}
	end, ok, err := e.journalEnd(p.Txn)
	if err != nil || !ok {
		if err != nil {
			e.log.Warn("the cluster shows a transaction of this node open that its journal cannot say the end of", "txn", p.Txn, "err", err)
		}
		return false, nil
	}
	if err := h.Close(ctx, *p, end.outcome, end.reason, end.halts); err != nil {
		return false, fmt.Errorf("recording the end of transaction %s in the cluster: %w", p.Txn, err)
	}
	what := "the write had failed when it ended, and the other nodes waited for it"
	if !end.halts && end.outcome == string(journal.PhaseRolledBack) {
		what = "it ended before it changed anything (its begin reached the cluster late), so the rollout is not halted"
	}
	e.event(p.Txn, journal.Phase(end.outcome), "cluster-end", "", "", fmt.Sprintf("recorded in the cluster that transaction %s ended %s: %s", p.Txn, end.outcome, what))
	return true, nil
}

// staleEnd is how the journal ended a transaction, as the cluster records it.
type staleEnd struct {
	outcome, reason string
	// halts: the end halts the rollout (a rollback of a transaction that
	// changed something, or a failed rollback).
	halts bool
}

// journalEnd is how the journal ended transaction id; false when the
// journal holds it open or not at all. A transaction rolled back before
// any record of its applying or verifying phase changed nothing: its end
// halts nothing.
func (e *Engine) journalEnd(id string) (staleEnd, bool, error) {
	t, err := e.j.Txn(id)
	if err != nil || t == nil || !t.Phase.Known() || t.Phase.Open() {
		return staleEnd{}, false, nil
	}
	end := staleEnd{outcome: string(t.Phase), reason: t.Reason}
	switch t.Phase {
	case journal.PhaseRollbackFailed:
		end.halts = true
	case journal.PhaseRolledBack:
		recs, err := e.j.Records(id)
		if err != nil {
			return staleEnd{}, false, err
		}
		end.halts = slices.ContainsFunc(recs, func(r journal.Record) bool {
			return r.Phase == journal.PhaseApplying || r.Phase == journal.PhaseVerifying
		})
		if !end.halts {
			end.reason = "ended before it changed anything: " + t.Reason
		}
	}
	return end, true, nil
}
