package engine

// A node of a multi-member etcd cluster changes only while it holds the
// cluster's rollout lock (package cluster): one node at a time, none while
// another node's transaction is open or the rollout is halted. A
// single-member node has nobody to coordinate with and takes no lock.

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Coordination configures the rollout lock of a multi-member cluster.
type Coordination struct {
	// TTL is the lock's lease (cluster.Config.TTL; default 15 s).
	TTL time.Duration
	// Wait bounds the wait while another node holds the lock
	// (cluster.Config.Wait; default 30 minutes).
	Wait time.Duration
}

// coordinated runs f, holding the rollout lock when st's etcd has more than
// one member. resume is the open transaction being driven again ("" for a
// new one). f's result decides how the node's progress ends: an outcome
// ends it (a rollback halts the rollout), an open transaction leaves it
// open, so that it keeps owning the rollout.
func (e *Engine) coordinated(ctx context.Context, st *nodestate.NodeState, kind, resume string, f func() (Result, error)) (Result, error) {
	if st.SingleMember() {
		return f()
	}
	c, err := cluster.Connect(ctx, cluster.Config{
		Local: etcddata.Endpoint(st), Known: e.knownEndpoints(), Node: st.NodeName,
		TTL: e.coord.TTL, Wait: e.coord.Wait, Log: e.log,
		Waiting: func(h cluster.Holder) {
			e.event(resume, "", "cluster-lock", "", "the rollout lock", waitingMessage(h))
		},
	})
	if err != nil {
		return Result{Txn: resume}, err
	}
	defer c.Close()
	e.saveEndpoints(c.Endpoints())
	h, err := c.Acquire(ctx, kind, resume)
	if err != nil {
		return Result{Txn: resume}, err
	}
	defer h.Release()
	e.hold = h
	defer func() { e.hold = nil }()
	res, err := f()
	switch res.Outcome {
	case Committed, RolledBack, RollbackFailed:
		if eerr := h.End(ctx, string(res.Outcome), res.Reason); eerr != nil {
			e.log.Error("the cluster does not know how this node's transaction ended; other nodes refuse to begin until `stratum-upgrade resume` here records it", "txn", res.Txn, "err", eerr)
		}
	}
	return res, err
}

// waitingMessage says whom a node waits for. A lock whose holder has not
// written who it is (it has just taken it; or it is another waiting node
// that took the lock only to find the rollout still owned by a node cut
// off or crashed, and lets go at once) has no node to name.
func waitingMessage(h cluster.Holder) string {
	if h.Node == "" {
		return "waiting for the rollout lock (held by a node that has not said who it is yet)"
	}
	return fmt.Sprintf("waiting for node %s to finish its %s (it holds the rollout lock since %s)", h.Node, h.Kind, h.Since.Format(time.RFC3339))
}

// recordBegin records a new transaction as this node's open one. Should the
// cluster refuse it (the lease expired while it waited), the transaction is
// rolled back before anything was done, and the rollout is not halted.
func (e *Engine) recordBegin(ctx context.Context, txn *journal.Txn, to *nodestate.NodeState) (bool, error) {
	if e.hold == nil {
		return true, nil
	}
	err := e.hold.Begin(ctx, cluster.Progress{Txn: txn.ID, Kind: txn.Kind, Phase: string(txn.Phase), To: versionsOf(to)})
	if err == nil {
		return true, nil
	}
	reason := fmt.Sprintf("the cluster could not record the transaction, so nothing was changed: %v", err)
	if uerr := e.startRollback(txn, reason); uerr != nil {
		return false, fmt.Errorf("%w: %v (and %v)", errFatalJournal, uerr, err)
	}
	return false, nil
}

// recordResume records that the open transaction is driven again.
func (e *Engine) recordResume(ctx context.Context, txn *journal.Txn) {
	if e.hold == nil {
		return
	}
	to, _ := nodestate.Parse(txn.To)
	if err := e.hold.Resumed(ctx, cluster.Progress{Txn: txn.ID, Kind: txn.Kind, Phase: string(txn.Phase), To: versionsOf(to)}); err != nil {
		e.log.Warn("the cluster's view of this node's transaction is behind", "txn", txn.ID, "err", err)
	}
}

// recordPhase tells the cluster the transaction's new phase (best effort).
func (e *Engine) recordPhase(p journal.Phase) {
	if e.hold != nil {
		e.hold.Phase(context.Background(), string(p))
	}
}

func versionsOf(st *nodestate.NodeState) string {
	if st == nil {
		return ""
	}
	return fmt.Sprintf("kubernetes %s, etcd %s", st.KubernetesVersion, st.Images[nodestate.Etcd])
}

func (e *Engine) endpointsPath() string {
	return filepath.Join(filepath.Dir(e.j.Path()), cluster.EndpointsFile)
}

// knownEndpoints are the members' client URLs kept by the last
// coordination; a damaged file costs only that fallback.
func (e *Engine) knownEndpoints() []string {
	eps, err := cluster.LoadEndpoints(e.endpointsPath())
	if err != nil {
		e.log.Warn("ignoring the known etcd endpoints", "err", err)
	}
	return eps
}

// saveEndpoints keeps eps for knownEndpoints; a failure only costs the
// fallback.
func (e *Engine) saveEndpoints(eps []string) {
	if err := cluster.SaveEndpoints(e.endpointsPath(), eps); err != nil {
		e.log.Warn("could not keep the cluster's etcd endpoints", "err", err)
	}
}
