package engine

// The driver: moves a transaction through its phases, resuming from the
// journal.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// run is the state of one transaction being driven.
type run struct {
	txn  *journal.Txn
	from *nodestate.NodeState
	to   *nodestate.NodeState
	recs []journal.Record
	// snap is the transaction's manifest snapshot, once a rollback loaded it.
	snap    *snapshot.Loaded
	started time.Time
	steps   []StepTime
	// fromNode and toNode are from and to resolved, once (resolved).
	fromNode, toNode *resolve.Node
	// surged is the surge pod's UID of each component whose step this run
	// surges, from its surge copy's answer until the copy is removed.
	surged map[string]string
}

// resolved is r's node states resolved, computed on first use: from and
// to are never replaced during a run.
func (r *run) resolved() (from, to *resolve.Node) {
	if r.fromNode == nil {
		r.fromNode, r.toNode = resolve.Resolve(r.from), resolve.Resolve(r.to)
	}
	return r.fromNode, r.toNode
}

// load reads what driving txn needs from the journal, after trustOpen has
// checked every path and id of it the engine acts on: an untrusted
// transaction is refused (UntrustedJournalError) before anything is done.
// A transaction a schema-1 binary left, going forwards, gets its targets
// pinned (pinTargets).
func (e *Engine) load(txn *journal.Txn) (*run, error) {
	recs, err := e.trustOpen(txn)
	if err != nil {
		return nil, err
	}
	from, err := nodestate.Parse(txn.From)
	if err != nil {
		return nil, fmt.Errorf("transaction %s: node state before: %w", txn.ID, err)
	}
	to, err := nodestate.Parse(txn.To)
	if err != nil {
		return nil, fmt.Errorf("transaction %s: node state after: %w", txn.ID, err)
	}
	r := &run{txn: txn, from: from, to: to, recs: recs, started: time.Now()}
	if err := e.wedgedUndo(r); err != nil {
		return nil, err
	}
	if len(txn.Targets) == 0 && txn.Phase.Open() && txn.Phase != journal.PhaseRollingBack {
		if err := e.pinTargets(r); err != nil {
			return nil, fmt.Errorf("transaction %s: %w", txn.ID, err)
		}
	}
	return r, nil
}

// drive moves the transaction through its phases until it ends or ctx does.
func (e *Engine) drive(ctx context.Context, txn *journal.Txn) (Result, error) {
	r, err := e.load(txn)
	if err != nil {
		return Result{Txn: txn.ID}, err
	}
	for {
		var stepErr error
		switch r.txn.Phase {
		case journal.PhasePlanned:
			stepErr = e.takeSnapshot(ctx, r)
		case journal.PhaseSnapshotted, journal.PhaseApplying:
			stepErr = e.apply(ctx, r)
		case journal.PhaseVerifying:
			stepErr = e.verify(ctx, r)
		case journal.PhaseRollingBack:
			return e.rollback(ctx, r)
		case journal.PhaseCommitted:
			e.prune()
			return r.result(Committed, ""), nil
		default:
			return r.result(Outcome(r.txn.Phase), r.txn.Reason), fmt.Errorf("transaction %s is in phase %s", r.txn.ID, r.txn.Phase)
		}
		if stepErr == nil {
			continue
		}
		if ctx.Err() != nil {
			return r.result("", ""), fmt.Errorf("%w in phase %s of transaction %s (%v): %w", ErrInterrupted, r.txn.Phase, r.txn.ID, stepErr, ErrStillOpen)
		}
		if errors.Is(stepErr, errFatalJournal) {
			return r.result("", ""), stepErr
		}
		if errors.Is(stepErr, errGatePaused) || errors.Is(stepErr, errImageWait) {
			return r.result("", ""), fmt.Errorf("%w in phase %s of transaction %s: %v: %w", ErrInterrupted, r.txn.Phase, r.txn.ID, stepErr, ErrStillOpen)
		}
		e.log.Info("upgrade step failed; rolling back", "txn", r.txn.ID, "phase", r.txn.Phase, "err", stepErr)
		if err := e.setPhase(r, journal.PhaseRollingBack, stepErr.Error()); err != nil {
			return r.result("", ""), err
		}
		e.event(r.txn.ID, journal.PhaseRollingBack, "rollback", "", "", "rolling back: "+stepErr.Error())
		e.hit(fault.AfterRollingBack)
	}
}

// errFatalJournal marks a journal write that failed: the engine cannot go on
// (it must not act without the record) and cannot record a rollback either.
var errFatalJournal = errors.New("journal write failed")

func (r *run) result(o Outcome, reason string) Result {
	return Result{Txn: r.txn.ID, Outcome: o, Reason: reason, Changed: r.txn.Changed, Elapsed: time.Since(r.started), Steps: r.steps}
}

func (e *Engine) setPhase(r *run, p journal.Phase, reason string) error {
	if err := move(r.txn.Phase, p); err != nil {
		return err
	}
	err := e.j.Update(r.txn.ID, func(t *journal.Txn) error {
		t.Phase = p
		if reason != "" {
			t.Reason = reason
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errFatalJournal, err)
	}
	r.txn.Phase = p
	if reason != "" {
		r.txn.Reason = reason
	}
	e.recordPhase(p)
	return nil
}

// append journals recs, setting the phase, before the caller acts on them.
func (e *Engine) append(r *run, p journal.Phase, recs ...journal.Record) error {
	if err := move(r.txn.Phase, p); err != nil {
		return err
	}
	stored, err := e.j.Append(r.txn.ID, p, recs...)
	if err != nil {
		return fmt.Errorf("%w: %v", errFatalJournal, err)
	}
	r.recs = append(r.recs, stored...)
	if r.txn.Phase != p {
		e.recordPhase(p)
	}
	r.txn.Phase = p
	return nil
}

// findIn returns the last record of step and component in any of phases.
func (r *run) findIn(step journal.Step, component string, phases ...journal.Phase) (journal.Record, bool) {
	for i := len(r.recs) - 1; i >= 0; i-- {
		rec := r.recs[i]
		if slices.Contains(phases, rec.Phase) && rec.Step == step && rec.Component == component {
			return rec, true
		}
	}
	return journal.Record{}, false
}

// find returns the last record of phase p, step and component, if any.
func (r *run) find(p journal.Phase, step journal.Step, component string) (journal.Record, bool) {
	return r.findIn(step, component, p)
}
