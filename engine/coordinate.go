package engine

// A node of a multi-member etcd cluster changes only while it holds the
// cluster's rollout lock (package cluster): one node at a time, none while
// another node's transaction is open or the rollout is halted. A
// single-member node has nobody to coordinate with and takes no lock.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// Coordination configures the rollout lock of a multi-member cluster.
type Coordination struct {
	// TTL is the lock's lease (cluster.Config.TTL; default 15 s).
	TTL time.Duration
	// Wait bounds the wait while another node holds the lock
	// (cluster.Config.Wait; default 30 minutes).
	Wait time.Duration
	// Members is the etcd member count the operator stated
	// (--etcd-members), used only when etcd's member list cannot be read
	// (topology.go); 0: none stated.
	Members int
}

// coordinated runs f, holding the rollout lock unless t, this node's
// topology read for this transaction, says its etcd is the cluster's only
// member. c is the coordinator t was read through (nil when etcd could not
// be reached then: it is connected again here, and a cluster that cannot be
// reached ends the command). resume is the open transaction being driven
// again ("" for a new one); to is the state it moves to (nil when not
// known), whose etcd minor, when lower, a halted rollout lets a rollback
// --last go back to while etcd downgrades. f's result decides how the node's progress
// ends: an outcome ends it (a rollback halts the rollout), an open
// transaction leaves it open, so that it keeps owning the rollout.
func (e *Engine) coordinated(ctx context.Context, t topology, c *cluster.Coordinator, st, to *nodestate.NodeState, kind, resume string, f func() (Result, error)) (Result, error) {
	e.top = t
	defer func() { e.top = topology{} }()
	e.keep(t, c)
	if t.single() {
		return f()
	}
	if c == nil {
		var err error
		if c, err = cluster.Connect(ctx, e.clusterConfig(st, resume)); err != nil {
			return Result{Txn: resume}, fmt.Errorf("this node's etcd is one of %d members (%s), and the cluster must be reached for the rollout lock: %w", t.members, t.source, err)
		}
		defer c.Close()
		e.saveEndpoints(c.Endpoints())
	}
	h, err := c.AcquireEtcdDown(ctx, kind, resume, etcdDownTo(st, to))
	if err != nil {
		return Result{Txn: resume}, err
	}
	defer h.Release()
	if _, err := e.closeStale(ctx, h, c, st.NodeName, resume); err != nil {
		e.log.Warn("the cluster still shows an ended transaction of this node open", "err", err)
	}
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

// clusterConfig is how this node, of state st, reaches its cluster: its
// own member first, then the endpoints the last coordination kept. txn
// names the transaction a wait for the lock is reported under.
func (e *Engine) clusterConfig(st *nodestate.NodeState, txn string) cluster.Config {
	local := etcddata.Endpoint(st)
	if e.etcdClient != nil {
		local = e.etcdClient(st)
	}
	return cluster.Config{
		Local: local, Known: e.knownEndpoints(), Node: st.NodeName,
		TTL: e.coord.TTL, Wait: e.coord.Wait, Log: e.log,
		Waiting: func(h cluster.Holder) {
			e.event(txn, "", "cluster-lock", "", "the rollout lock", waitingMessage(h))
		},
	}
}

// recordBegin records a new transaction as this node's open one. Should the
// cluster refuse it (the lease expired while it waited, or a write that
// failed and was read back unrecorded), the transaction is rolled back
// before anything was done, and the rollout is not halted. When whether
// the cluster recorded it is unknown (the write and its read-back failed),
// nothing is decided: the transaction stays open, untouched, and the run
// ends interrupted; resume drives it once the cluster answers, after the
// halt and busy checks if the cluster has no record of it.
func (e *Engine) recordBegin(ctx context.Context, txn *journal.Txn, to *nodestate.NodeState) (bool, error) {
	if e.hold == nil {
		return true, nil
	}
	from, _ := nodestate.Parse(txn.From)
	err := e.hold.Begin(ctx, progressOf(txn, from, to))
	if err == nil {
		return true, nil
	}
	if errors.Is(err, cluster.ErrBeginUnknown) || errors.Is(err, cluster.ErrBeginNotSent) {
		return false, fmt.Errorf("%w before anything was changed: %v; run `stratum-upgrade resume` once the cluster's etcd answers: %w", ErrInterrupted, err, ErrStillOpen)
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
	from, _ := nodestate.Parse(txn.From)
	to, _ := nodestate.Parse(txn.To)
	if err := e.hold.Resumed(ctx, progressOf(txn, from, to)); err != nil {
		e.log.Warn("the cluster's view of this node's transaction is behind", "txn", txn.ID, "err", err)
	}
}

// recordPhase tells the cluster the transaction's new phase (best effort).
func (e *Engine) recordPhase(p journal.Phase) {
	if e.hold != nil {
		e.hold.Phase(context.Background(), string(p))
	}
}

// progressOf is txn's record in the cluster, from state from to state to
// (either nil when not known).
func progressOf(txn *journal.Txn, from, to *nodestate.NodeState) cluster.Progress {
	return cluster.Progress{Txn: txn.ID, Kind: txn.Kind, Phase: string(txn.Phase), To: versionsOf(to),
		APIServerFrom: apiServerOf(from), APIServerTo: apiServerOf(to)}
}

// apiServerOf is st's kube-apiserver version ("v1.36.3"), "" when st is
// nil or has none.
func apiServerOf(st *nodestate.NodeState) string {
	if st == nil || resolve.Image(st, nodestate.KubeAPIServer) == "" {
		return ""
	}
	v, err := resolve.Version(st, nodestate.KubeAPIServer)
	if err != nil || v == nil {
		return ""
	}
	return "v" + v.String()
}

func versionsOf(st *nodestate.NodeState) string {
	if st == nil {
		return ""
	}
	return fmt.Sprintf("kubernetes %s, etcd %s", st.KubernetesVersion, resolve.Image(st, nodestate.Etcd))
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

// reconcileEnd records in the cluster how this node's last transaction
// ended, when the cluster still shows it open: the write of its end failed
// (the link dropped, etcd lost quorum) after the journal had ended it, and
// every other node waits for it while the cluster says so, and a rollback's
// halt is missing. Resume calls it when no transaction is open. A single
// member (its live member list), a journal without a node state or an ended transaction, and a
// cluster that already knows are nothing to do; a cluster it cannot reach
// is a warning only, since the node itself needs nothing.
func (e *Engine) reconcileEnd(ctx context.Context) (Result, error) {
	nothing := Result{Outcome: Nothing}
	st, err := e.j.NodeState()
	if errors.Is(err, journal.ErrNoState) {
		return nothing, nil
	}
	if err != nil {
		return nothing, err
	}
	hist, err := e.j.History(1)
	if err != nil {
		return nothing, err
	}
	if len(hist) == 0 || !hist[0].Phase.Known() || hist[0].Phase.Open() {
		return nothing, nil
	}
	last := hist[0]
	t, c, err := e.topology(ctx, st, last.ID)
	if c != nil {
		defer c.Close()
	}
	switch {
	case err == nil && t.single():
		// A single member: nothing of the rollout is kept in etcd.
		e.keep(t, c)
		return nothing, nil
	case err == nil && c == nil:
		err = fmt.Errorf("the cluster of %d members (%s) cannot be reached", t.members, t.source)
	}
	if err != nil {
		e.log.Warn("could not check that the cluster knows how this node's last transaction ended", "txn", last.ID, "err", err)
		return nothing, nil
	}
	e.keep(t, c)
	p, err := c.Node(ctx, st.NodeName)
	if err != nil {
		e.log.Warn("could not check that the cluster knows how this node's last transaction ended", "txn", last.ID, "err", err)
		return nothing, nil
	}
	if p == nil || !p.Open() || p.Txn != last.ID {
		return nothing, nil
	}
	h, err := c.Acquire(ctx, last.Kind, last.ID)
	if err != nil {
		return Result{Outcome: Nothing, Txn: last.ID}, fmt.Errorf("the cluster still shows transaction %s open, which ended %s here; recording its end: %w", last.ID, last.Phase, err)
	}
	defer h.Release()
	if _, err := e.closeStale(ctx, h, c, st.NodeName, ""); err != nil {
		return Result{Outcome: Nothing, Txn: last.ID}, err
	}
	return Result{Outcome: Nothing, Txn: last.ID}, nil
}
