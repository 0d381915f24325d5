package engine

// The hook a caller gets when a transaction ends: what the cluster is told
// (package kubeapi, through the CLI) happens after the journal holds the
// end, and can never change it.

import "github.com/ciq/stratum-upgrade/nodestate"

// End is how a transaction ended, as Config.Ended receives it.
type End struct {
	Txn     string
	Kind    string
	Outcome Outcome
	// Reason is why it rolled back (empty on a commit).
	Reason string
	// State is the node state the node runs now, as far as the journal
	// knows: the transaction's after a commit, its before after a rollback
	// (rolled back or failed to).
	State *nodestate.NodeState
	// From and Target are the node states the transaction went from and
	// to.
	From, Target *nodestate.NodeState
}

// ended tells Config.Ended, if set, that r's transaction ended with o. The
// journal already holds the end: nothing the hook does changes it.
func (e *Engine) ended(r *run, o Outcome, reason string) {
	if e.onEnd == nil {
		return
	}
	now := r.from
	if o == Committed {
		now = r.to
	}
	e.onEnd(End{Txn: r.txn.ID, Kind: r.txn.Kind, Outcome: o, Reason: reason, State: now, From: r.from, Target: r.to})
}
