package engine

// rollback --last: the last committed transaction undone as a new one, or
// refused before anything is journaled.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/snapshot"
	"github.com/ciq/stratum-upgrade/versions"
)

// ErrCannotUndo is wrapped by the refusal of a rollback --last that cannot
// undo the last committed transaction; the message names what to run
// instead. Nothing was journaled.
var ErrCannotUndo = errors.New("rollback --last refused")

// undo is the plan of a rollback-last and what its transaction records.
type undo struct {
	plan *Plan
	// source is the retained snapshot an upgrade's undo puts back; empty
	// for a stop's or a start's, whose targets are renders.
	source string
	// what is the begin event's account.
	what string
}

// RollbackLast undoes the last committed transaction as a new one (kind
// rollback-last) with the same waits, verification and automatic rollback
// as an upgrade: an upgrade or a node-state apply by putting back its
// retained snapshot (and its node state), a stop by starting the
// components it stopped, a start by stopping the ones it started.
// Restarts change nothing and are passed over: the transaction undone is
// the last one that changed the node (ErrNothingToDo when only restarts
// were committed). What it cannot undo
// (a rollback-last, a snapshot retention removed, etcd's minor going down
// by more than one or below 3.6, the control plane going down) is refused
// with ErrCannotUndo before anything is journaled; the message names the
// command to run instead. etcd's data is never restored: after a commit it
// holds writes the snapshot does not. etcd going down one minor is done
// with etcd's downgrade protocol before etcd's step (downgradeBeforeStep).
func (e *Engine) RollbackLast(ctx context.Context) (Result, error) {
	if open, err := e.j.OpenTxn(); err != nil {
		return Result{}, err
	} else if open != nil {
		return Result{}, openTxnError(open)
	}
	last, err := e.lastCommitted()
	if err != nil {
		return Result{}, err
	}
	if _, err := e.trustOpen(last); err != nil {
		return Result{}, fmt.Errorf("rollback --last: %w", err)
	}
	cur, err := e.j.NodeState()
	if err != nil {
		return Result{}, err
	}
	return e.begin(ctx, journal.KindRollbackLast, cur, func(t topology) (*beginning, error) {
		u, err := e.planUndo(cur, last, t)
		if err != nil {
			return nil, err
		}
		// What the transaction will be checked against when it is driven
		// is checked now, before Begin: a refusal after Begin would leave
		// an open transaction that resume and rollback refuse too.
		if err := e.trustSource(&journal.Txn{Kind: journal.KindRollbackLast, Source: u.source}); err != nil {
			return nil, fmt.Errorf("rollback --last: %w", err)
		}
		return &beginning{plan: u.plan, source: u.source, what: u.what, subject: "rollback --last"}, nil
	})
}

// PlanRollbackLast is rollback --last's dry run: the plan of undoing the
// journal's last committed transaction against the manifests in store, and
// its account, or RollbackLast's refusal; members is the etcd cluster's
// member count as last known. Nothing is written or journaled, and etcd is
// not asked (the real rollback --last reads the member count from it).
func PlanRollbackLast(j *journal.Journal, store Manifests, members int) (*Plan, string, error) {
	if open, err := j.OpenTxn(); err != nil {
		return nil, "", err
	} else if open != nil {
		return nil, "", openTxnError(open)
	}
	e := &Engine{j: j, store: store}
	last, err := e.lastCommitted()
	if err != nil {
		return nil, "", err
	}
	cur, err := j.NodeState()
	if err != nil {
		return nil, "", err
	}
	u, err := e.planUndo(cur, last, topology{members: members})
	if err != nil {
		return nil, "", err
	}
	return u.plan, u.what, nil
}

// lastCommitted is the newest committed transaction of the journal that
// changed the node: restarts are passed over, since a restart changes
// neither the node state nor what runs and so leaves nothing to undo (and
// the upgrade before it can be undone only by rollback --last: run refuses
// a downgrade). A journal whose committed transactions are all restarts
// has nothing to undo (ErrNothingToDo).
func (e *Engine) lastCommitted() (*journal.Txn, error) {
	hist, err := e.j.History(0)
	if err != nil {
		return nil, err
	}
	var restart *journal.Txn
	for i := range hist {
		if hist[i].Phase != journal.PhaseCommitted {
			continue
		}
		if hist[i].Kind != journal.KindRestart {
			return &hist[i], nil
		}
		if restart == nil {
			restart = &hist[i]
		}
	}
	if restart != nil {
		return nil, fmt.Errorf("%w: the journal's committed transactions are restarts (the last %s restarted %s): a restart changes neither the node state nor what runs, so it has nothing to undo", ErrNothingToDo, restart.ID, strings.Join(restart.Changed, ", "))
	}
	return nil, fmt.Errorf("%w: the journal holds no committed transaction, so there is nothing to undo", ErrCannotUndo)
}

// planUndo is the plan that undoes last, the newest committed transaction,
// from cur, the journal's node state, on a node of topology t; or the
// refusal.
func (e *Engine) planUndo(cur *nodestate.NodeState, last *journal.Txn, t topology) (*undo, error) {
	comps := strings.Join(last.Changed, " ")
	switch last.Kind {
	case journal.KindUpgrade:
		return e.planUndoUpgrade(cur, last)
	case journal.KindStop:
		plan, err := PlanStart(e.store, cur, last.Changed, e.store.Stamp())
		if err != nil {
			return nil, fmt.Errorf("%w: the last committed transaction %s stopped %s, but starting them again cannot be planned: %w; run `start %s` once the cause is fixed", ErrCannotUndo, last.ID, comps, err, comps)
		}
		return &undo{plan: plan, what: fmt.Sprintf("roll back %s (stop): start %s", last.ID, strings.Join(plan.Changed(), ", "))}, nil
	case journal.KindStart:
		plan, err := PlanStop(e.store, cur, last.Changed, StopOptions{members: t.members})
		if err != nil {
			return nil, fmt.Errorf("%w: the last committed transaction %s started %s, and stopping them again is refused: %w; run `stop %s` with the flags it names instead", ErrCannotUndo, last.ID, comps, err, comps)
		}
		return &undo{plan: plan, what: fmt.Sprintf("roll back %s (start): stop %s", last.ID, strings.Join(plan.Changed(), ", "))}, nil
	case journal.KindRollbackLast:
		return nil, fmt.Errorf("%w: the last committed transaction %s is itself a rollback --last; to go further back, run an upgrade to the release you want (`run --to RELEASE`) or apply the node state you want (`apply --state FILE`)", ErrCannotUndo, last.ID)
	}
	return nil, fmt.Errorf("%w: the last committed transaction %s is of kind %q, which this stratum-upgrade does not know", ErrCannotUndo, last.ID, last.Kind)
}

// planUndoUpgrade is the undo of an upgrade or a node-state apply: its
// retained snapshot put back, its node state before made the journal's.
func (e *Engine) planUndoUpgrade(cur *nodestate.NodeState, last *journal.Txn) (*undo, error) {
	old, err := nodestate.Parse(last.From)
	if err != nil {
		return nil, fmt.Errorf("rollback --last: node state before %s: %w", last.ID, err)
	}
	instead := "apply the node state it replaced (`apply --state FILE`)"
	if len(last.Release) > 0 {
		instead = "run an upgrade to the release before it (`run --to RELEASE`)"
	}
	snap, err := snapshot.Load(last.SnapshotDir, manifest.DerivedPaths(old))
	if err != nil {
		return nil, fmt.Errorf("%w: the snapshot of %s is not usable (retention may have removed it): %w; %s instead", ErrCannotUndo, last.ID, err, instead)
	}
	plan, err := planFromSnapshot(e.store, cur, old, snap)
	if err != nil {
		if errors.Is(err, ErrNothingToDo) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrCannotUndo, err)
	}
	history := func() ([]versions.Ran, error) { return e.ranStates(last.ID) }
	f, err := versions.CheckBinaryRollback(resolve.Resolve(cur), resolve.Resolve(old), history)
	if err != nil {
		return nil, err
	}
	if len(f) > 0 {
		_, err := preflight{subject: "rollback --last of " + last.ID}.settle(f)
		return nil, fmt.Errorf("%w: %w", ErrCannotUndo, err)
	}
	return &undo{plan: plan, source: last.SnapshotDir, what: fmt.Sprintf("roll back %s: %s change", last.ID, strings.Join(plan.Changed(), ", "))}, nil
}

// wedgedUndo rolls back, instead of driving forwards, an open rollback-last
// that an older stratum-upgrade began for a stop, start or restart: it put
// back that transaction's snapshot (a start's would leave manifests the
// node state lists as stopped) and then refused to drive it, so it was
// never snapshotted and nothing was written. The rollback closes it.
func (e *Engine) wedgedUndo(r *run) error {
	t := r.txn
	if t.Kind != journal.KindRollbackLast || t.Source == "" || !t.Phase.Open() || t.Phase == journal.PhaseRollingBack {
		return nil
	}
	src, err := e.j.Txn(filepath.Base(t.Source))
	if err != nil {
		return fmt.Errorf("transaction %s: the transaction it undoes: %w", t.ID, err)
	}
	if src.Kind == journal.KindUpgrade {
		return nil
	}
	reason := fmt.Sprintf("rollback --last of %s (%s) was begun by an older stratum-upgrade, which could not undo a %s; rolled back instead (run rollback --last again)", src.ID, src.Kind, src.Kind)
	e.log.Warn("rolling back a rollback --last an older stratum-upgrade began", "txn", t.ID, "undoes", src.ID, "kind", src.Kind)
	return e.startRollback(t, reason)
}
