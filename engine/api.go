package engine

// The engine's API: what a caller runs, and what it gets back.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// Outcome is how a transaction ended.
type Outcome string

// Outcomes.
const (
	Committed      Outcome = "committed"
	RolledBack     Outcome = "rolled-back"
	RollbackFailed Outcome = "rollback-failed"
	// Nothing: there was no transaction to resume.
	Nothing Outcome = "nothing"
)

// Result is what a Run, Resume or Rollback did.
type Result struct {
	Txn     string        `json:"txn,omitempty"`
	Outcome Outcome       `json:"outcome"`
	Reason  string        `json:"reason,omitempty"`
	Changed []string      `json:"changed,omitempty"`
	Elapsed time.Duration `json:"elapsedNs"`
	// Steps is how long each component's step took, write to active.
	Steps []StepTime `json:"steps,omitempty"`
}

// StepTime is one component step's duration.
type StepTime struct {
	Component string        `json:"component"`
	Phase     string        `json:"phase"`
	Elapsed   time.Duration `json:"elapsedNs"`
}

// Errors a caller tells apart.
var (
	// ErrNothingToDo: the release changes no manifest of this node.
	ErrNothingToDo = errors.New("nothing to do")
	// ErrRolledBack: the upgrade failed and the node is back as it was.
	ErrRolledBack = errors.New("upgrade rolled back")
	// ErrRollbackFailed: the upgrade failed and so did its rollback; the
	// node needs an operator (Result.Reason and the journal say what).
	ErrRollbackFailed = errors.New("rollback failed")
	// ErrInterrupted: the context ended mid-transaction (or a rollback
	// paused on a cause an operator must fix); it stays open in the journal
	// and Resume continues it. It always comes with ErrStillOpen.
	ErrInterrupted = errors.New("interrupted")
	// ErrStillOpen: the transaction is still open in the journal (after an
	// interruption, or a journal write that failed); Resume continues it.
	ErrStillOpen = errors.New("the transaction is still open")
	// ErrUnrestorable: a manifest on disk is one the transaction could
	// snapshot but never roll back to (it does not decode as its pod).
	ErrUnrestorable = errors.New("a manifest a rollback could not restore")
	// ErrEtcdBackupTimeout: the etcd backup before an etcd change did not
	// finish within Deadlines.EtcdBackup.
	ErrEtcdBackupTimeout = errors.New("etcd backup timed out")
)

// RollbackFailedError is the error of a transaction that ended
// rollback-failed. It wraps ErrRollbackFailed and carries what a caller
// needs to advise the operator.
type RollbackFailedError struct {
	Txn string
	// Reason is the upgrade's failure and then the rollback's.
	Reason string
	// EtcdDataDir and EtcdAside are set when etcd's data dir is missing and
	// the data it held was moved to EtcdAside by the failed restore:
	// re-rendering etcd before moving it back would start an empty cluster.
	EtcdDataDir, EtcdAside string
}

func (e *RollbackFailedError) Error() string { return "rollback failed: " + e.Reason }

// Unwrap makes errors.Is(err, ErrRollbackFailed) hold.
func (e *RollbackFailedError) Unwrap() error { return ErrRollbackFailed }

// Plan computes what upgrading to rel would do, writing nothing, with
// every pre-flight check enforced.
func (e *Engine) Plan(rel *Release) (*Plan, error) {
	return e.PlanWith(context.Background(), rel, UpgradeOptions{})
}

// PlanWith is Plan with options: the pre-flight checks to let through.
func (e *Engine) PlanWith(ctx context.Context, rel *Release, opts UpgradeOptions) (*Plan, error) {
	st, err := e.j.NodeState()
	if err != nil {
		return nil, err
	}
	opts.history = func() ([]versions.Ran, error) { return e.ranStates("") }
	opts.log = e.log
	if opts.Kubelet == nil {
		opts.Kubelet = e.kubelet
	}
	return PlanUpgrade(ctx, e.store, e.procs, st, rel, opts)
}

// Run upgrades the node to rel as one transaction and returns when it has
// committed (nil error), rolled back (ErrRolledBack), failed to roll back
// (ErrRollbackFailed) or was interrupted by ctx (ErrInterrupted, the
// transaction left open for Resume). A second transaction while one is open
// is refused with journal.ErrTxnOpen and changes nothing; so is a release
// that changes nothing (ErrNothingToDo) and one a pre-flight check refuses
// (*PreflightError).
func (e *Engine) Run(ctx context.Context, rel *Release, raw []byte) (Result, error) {
	return e.RunWith(ctx, rel, raw, UpgradeOptions{})
}

// RunWith is Run with options. The pre-flight checks it let through are
// journaled with the transaction (journal.Txn.IgnoredChecks) and each is
// reported as a "preflight" event.
func (e *Engine) RunWith(ctx context.Context, rel *Release, raw []byte, opts UpgradeOptions) (Result, error) {
	return e.change(ctx, journal.KindUpgrade, raw, opts.IgnorePreflight, func(p *Plan) string { return describe(p, true) }, func(t topology) (*Plan, error) {
		opts.members = t.members
		return e.PlanWith(ctx, rel, opts)
	})
}

// PlanState computes what applying the node state to would do (PlanState
// against the persisted node state), writing nothing.
func (e *Engine) PlanState(ctx context.Context, to *nodestate.NodeState, opts UpgradeOptions) (*Plan, error) {
	st, err := e.j.NodeState()
	if err != nil {
		return nil, err
	}
	opts.history = func() ([]versions.Ran, error) { return e.ranStates("") }
	opts.log = e.log
	if opts.Kubelet == nil {
		opts.Kubelet = e.kubelet
	}
	return PlanState(ctx, e.store, e.procs, st, to, opts)
}

// Apply changes the node to the node state to as one transaction, as Run
// does for a release (Run is Apply of the release applied to the node
// state): snapshot, the changed components in roster order with the waits,
// verify and soak, then commit, which makes to the persisted node state,
// or roll back, which leaves the node state as it was. It returns and is
// refused as Run is; a field no transaction can change is refused with a
// *StateChangeError, nothing written. The transaction is of kind upgrade,
// with no release.
func (e *Engine) Apply(ctx context.Context, to *nodestate.NodeState, opts UpgradeOptions) (Result, error) {
	return e.change(ctx, journal.KindUpgrade, nil, opts.IgnorePreflight, func(p *Plan) string { return describe(p, false) }, func(t topology) (*Plan, error) {
		opts.members = t.members
		return e.PlanState(ctx, to, opts)
	})
}

// change begins and drives a transaction of kind of the plan that plan
// returns, given this node's topology (read here, once, from the live
// cluster), once no transaction is open. raw is the release file a run was
// given, journaled as the transaction's Release; ignore names the image
// pre-flight findings to let through (UpgradeOptions.IgnorePreflight);
// what is the begin event's account of the plan.
func (e *Engine) change(ctx context.Context, kind string, raw []byte, ignore []string, what func(*Plan) string, plan func(topology) (*Plan, error)) (Result, error) {
	if open, err := e.j.OpenTxn(); err != nil {
		return Result{}, err
	} else if open != nil {
		return Result{}, openTxnError(open)
	}
	st, err := e.j.NodeState()
	if err != nil {
		return Result{}, err
	}
	return e.begin(ctx, kind, st, func(t topology) (*beginning, error) {
		p, err := plan(t)
		if err != nil {
			return nil, err
		}
		subject := kind + " of " + strings.Join(p.Changed(), ", ")
		switch {
		case raw != nil:
			subject = "release " + p.To.KubernetesVersion
		case kind == journal.KindUpgrade:
			subject = "node state " + p.To.KubernetesVersion
		}
		return &beginning{plan: p, release: raw, what: what(p), ignore: ignore, subject: subject}, nil
	})
}

// refusal is the error of a plan that refused (err) on a node whose
// topology is unknown (terr, nil when known): a refusal as the only
// control-plane node rests on the member count 0 an unknown topology plans
// with, and the node may be one of several, so the unknown topology is the
// answer.
func refusal(err, terr error) error {
	if terr != nil && errors.Is(err, ErrControlPlaneDown) {
		return terr
	}
	return err
}

func openTxnError(t *journal.Txn) error {
	return fmt.Errorf("%w: transaction %s (%s) is in phase %s", journal.ErrTxnOpen, t.ID, t.Kind, t.Phase)
}

// Resume continues the open transaction from its last durable step:
// forwards while it was applying or verifying, backwards once it was rolling
// back. With no open transaction it does nothing (Outcome Nothing), but
// on a multi-member cluster it records the last transaction's end where
// the cluster still shows it open (reconcileEnd).
func (e *Engine) Resume(ctx context.Context) (Result, error) {
	txn, err := e.j.OpenTxn()
	if err != nil {
		return Result{}, err
	}
	if txn == nil {
		return e.reconcileEnd(ctx)
	}
	return e.driveOwn(ctx, txn, func() error {
		e.event(txn.ID, txn.Phase, "resume", "", "", "resuming transaction "+txn.ID+" in phase "+string(txn.Phase))
		return nil
	})
}

// driveOwn drives the node's open transaction again, holding the rollout
// lock on a multi-member cluster; first runs once the lock is held, and
// its error ends it with nothing driven.
func (e *Engine) driveOwn(ctx context.Context, txn *journal.Txn, first func() error) (Result, error) {
	// An untrusted transaction is refused before anything, the cluster
	// included, is reached.
	if _, err := e.trustOpen(txn); err != nil {
		return Result{Txn: txn.ID}, err
	}
	from, err := nodestate.Parse(txn.From)
	if err != nil {
		return Result{Txn: txn.ID}, fmt.Errorf("transaction %s: node state before: %w", txn.ID, err)
	}
	t, c, err := e.topology(ctx, from, txn.ID)
	if err != nil {
		return Result{Txn: txn.ID}, err
	}
	if c != nil {
		defer c.Close()
	}
	to, _ := nodestate.Parse(txn.To) // only to let a rollback --last through a downgrade's halt
	return e.coordinated(ctx, t, c, from, to, txn.Kind, txn.ID, func() (Result, error) {
		if err := first(); err != nil {
			return Result{Txn: txn.ID}, err
		}
		e.recordResume(ctx, txn)
		return e.drive(ctx, txn)
	})
}

// Rollback rolls back the open transaction, whatever its phase.
func (e *Engine) Rollback(ctx context.Context, reason string) (Result, error) {
	txn, err := e.j.OpenTxn()
	if err != nil {
		return Result{}, err
	}
	if txn == nil {
		return Result{Outcome: Nothing}, errors.New("no open transaction to roll back; use --last to undo the last committed transaction")
	}
	// driveOwn checks trust before the journal write below: an untrusted
	// transaction is refused with nothing changed.
	return e.driveOwn(ctx, txn, func() error {
		if txn.Phase == journal.PhaseRollingBack {
			return nil
		}
		return e.startRollback(txn, reason)
	})
}

// startRollback journals txn as rolling back for reason, before drive
// (which then rolls it back), and updates txn to match.
func (e *Engine) startRollback(txn *journal.Txn, reason string) error {
	if err := e.j.Update(txn.ID, func(t *journal.Txn) error {
		t.Phase, t.Reason = journal.PhaseRollingBack, reason
		return nil
	}); err != nil {
		return err
	}
	txn.Phase, txn.Reason = journal.PhaseRollingBack, reason
	return nil
}
