package cluster

// A held lock: the checks made under it, and the node's progress written
// while it is held.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// writeTimeout bounds each coordination write. A write that fails is
// reported; the node's journal, not etcd, decides what the node does.
const writeTimeout = 10 * time.Second

// Hold is the rollout lock, held by this node.
type Hold struct {
	c        *Coordinator
	s        *concurrency.Session
	m        *concurrency.Mutex
	progress Progress
	// beginReported, when set (tests only), is the error Begin's write
	// reports after it committed: a write that timed out but took effect.
	beginReported error
}

// ErrBeginUnknown: the write of a transaction's begin failed and reading it
// back failed too, so whether the cluster recorded it is unknown; the
// caller must neither go on nor roll back as though it was never recorded.
var ErrBeginUnknown = errors.New("whether the cluster recorded the transaction is unknown")

// check refuses under the lock: a halt, or another node with a transaction
// open. A resumed transaction (resume != "") that the cluster recorded as
// this node's is its own, begun when it owned the rollout: neither refuses
// it. One the cluster has no record of (the node crashed between its
// journal's begin and the cluster's) never owned the rollout, and neither
// does one Forget closed since: each is checked as a new one. A halt lets
// through a rollback --last that moves this node's etcd down to the minor
// etcd reports a downgrade enabled to (etcdDownTo, AcquireEtcdDown).
func (h *Hold) check(ctx context.Context, kind, resume, etcdDownTo string) error {
	v, err := h.c.View(ctx)
	if err != nil {
		return err
	}
	if resume != "" {
		forgotten, err := h.forgotten(ctx, resume)
		if err != nil {
			return err
		}
		recorded := slices.ContainsFunc(v.Nodes, func(p Progress) bool { return p.Node == h.c.cfg.Node && p.Txn == resume })
		if recorded && !forgotten {
			return nil
		}
		if !recorded {
			h.c.cfg.Log.Info("the cluster has no record of this node's open transaction: checking the halt and the other nodes as for a new one", "txn", resume)
		}
	}
	if v.Halt != nil {
		through, err := h.downgradeThrough(ctx, kind, etcdDownTo)
		if err != nil {
			return err
		}
		if !through {
			return &HaltedError{Halt: *v.Halt}
		}
		h.c.cfg.Log.Info("the rollout is halted, but etcd downgrades to this transaction's etcd minor: rollback --last goes back with it", "target", etcdDownTo, "halt", v.Halt.Txn)
	}
	for _, p := range v.Nodes {
		if p.Node != h.c.cfg.Node && p.Open() {
			return &BusyError{Progress: p}
		}
	}
	return nil
}

// downgradeThrough reports whether a halt lets this transaction through:
// a rollback --last that moves this node's etcd down to the minor etcd
// reports a downgrade enabled to (decided from etcd, not from the halt).
func (h *Hold) downgradeThrough(ctx context.Context, kind, etcdDownTo string) (bool, error) {
	if kind != KindRollbackLast || etcdDownTo == "" {
		return false, nil
	}
	d, err := h.c.EtcdDowngrade(ctx)
	if err != nil || d == nil {
		return false, err
	}
	return minorOf(d.Target) == etcdDownTo, nil
}

// Begin records the node's transaction as open, only while this node holds
// the lock (a lease that expired since Acquire fails it).
func (h *Hold) Begin(ctx context.Context, p Progress) error {
	now := time.Now().UTC()
	p.Node, p.Started, p.Updated, p.Outcome = h.c.cfg.Node, now, now, ""
	v, err := encode(p)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	r, err := h.c.cli.Txn(wctx).If(h.m.IsOwner()).Then(clientv3.OpPut(nodesPrefix+h.c.cfg.Node, v)).Commit()
	if err == nil && h.beginReported != nil {
		err = h.beginReported
	}
	if err != nil {
		// A write that timed out may have taken effect all the same: what
		// the cluster holds decides, not the error.
		cur, rerr := h.readBack(ctx)
		switch {
		case rerr != nil:
			return fmt.Errorf("%w: transaction %s: the write failed (%v) and reading it back failed too (%v)", ErrBeginUnknown, p.Txn, err, rerr)
		case cur == nil || cur.Txn != p.Txn || !cur.Open():
			return fmt.Errorf("%w: record transaction %s: %v (read back: not recorded)", ErrUnreachable, p.Txn, err)
		}
		h.c.cfg.Log.Info("the write of the transaction's begin reported an error but took effect", "txn", p.Txn, "err", err)
		h.progress = *cur
		return nil
	}
	if !r.Succeeded {
		return fmt.Errorf("%w: this node's lease expired before transaction %s was recorded; run it again", ErrLockTimeout, p.Txn)
	}
	h.progress = p
	return nil
}

// readBack reads this node's progress, retrying for up to writeTimeout
// while etcd does not answer (a leader election after the failed write).
func (h *Hold) readBack(ctx context.Context) (*Progress, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	for {
		p, err := h.c.Node(ctx, h.c.cfg.Node)
		if err == nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Resumed records that the node's open transaction is being driven again.
func (h *Hold) Resumed(ctx context.Context, p Progress) error {
	cur, err := h.c.Node(ctx, h.c.cfg.Node)
	if err == nil && cur != nil && cur.Txn == p.Txn {
		p.Started = cur.Started
	}
	if p.Started.IsZero() {
		p.Started = time.Now().UTC()
	}
	p.Node, p.Updated = h.c.cfg.Node, time.Now().UTC()
	h.progress = p
	return h.write(ctx)
}

// Phase records the transaction's phase. Best effort: a failure is logged,
// the transaction goes on (its journal is the truth for the node).
func (h *Hold) Phase(ctx context.Context, phase string) {
	if h.progress.Txn == "" || h.progress.Phase == phase {
		return
	}
	h.progress.Phase, h.progress.Updated = phase, time.Now().UTC()
	if err := h.write(ctx); err != nil {
		h.c.cfg.Log.Warn("the cluster's view of this node's transaction is behind", "txn", h.progress.Txn, "phase", phase, "err", err)
	}
}

// End records how the transaction ended. A transaction that rolled back
// or whose rollback failed halts the rollout: the halt is written in the
// same etcd transaction as the node's progress.
func (h *Hold) End(ctx context.Context, outcome, reason string) error {
	if h.progress.Txn == "" {
		return nil
	}
	now := time.Now().UTC()
	h.progress.Outcome, h.progress.Phase, h.progress.Reason, h.progress.Updated = outcome, outcome, reason, now
	v, err := encode(h.progress)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(nodesPrefix+h.c.cfg.Node, v)}
	if outcome == "rolled-back" || outcome == "rollback-failed" {
		hv, err := encode(Halt{Node: h.c.cfg.Node, Txn: h.progress.Txn, Outcome: outcome, Reason: reason, At: now})
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(haltKey, hv))
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if _, err := h.c.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("%w: record the end (%s) of transaction %s: %v", ErrUnreachable, outcome, h.progress.Txn, err)
	}
	return nil
}

func (h *Hold) write(ctx context.Context) error {
	v, err := encode(h.progress)
	if err != nil {
		return err
	}
	return h.put(ctx, nodesPrefix+h.c.cfg.Node, v)
}

func (h *Hold) put(ctx context.Context, key, val string, opts ...clientv3.OpOption) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if _, err := h.c.cli.Put(ctx, key, val, opts...); err != nil {
		return fmt.Errorf("%w: write %s: %v", ErrUnreachable, key, err)
	}
	return nil
}

// Lost is closed when the lock's lease is lost (expired or revoked).
func (h *Hold) Lost() <-chan struct{} { return h.s.Done() }

// Release unlocks and revokes the lease (bounded by writeTimeout); when
// etcd cannot be reached, the lock frees itself when the lease expires.
func (h *Hold) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	if err := h.m.Unlock(ctx); err != nil {
		h.c.cfg.Log.Warn("rollout lock not released; it frees itself when its lease expires", "ttl", h.c.cfg.TTL, "err", err)
	}
	h.s.Close()
}

// Client is the etcd client of the held lock (every member's endpoint),
// for the quorum gate.
func (h *Hold) Client() *clientv3.Client { return h.c.cli }
