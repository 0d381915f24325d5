package cluster

// A held lock: the checks made under it, and the node's progress written
// while it is held.

import (
	"context"
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
	// beginLate, when set (tests only), holds Begin's write back: Begin
	// reports its error, and the test sends the write after the read-back.
	beginLate *lateWrite
}

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
	halts := outcome == "rolled-back" || outcome == "rollback-failed"
	p, err := h.close(ctx, h.progress, outcome, reason, halts)
	h.progress = p
	return err
}

// Close records the end of p, this node's transaction the cluster still
// shows open though its journal ended it, with the journal's outcome;
// halts writes the halt beside it, as End does. A transaction that ended
// before it changed anything closes without a halt: it did nothing to
// stop the rollout for.
func (h *Hold) Close(ctx context.Context, p Progress, outcome, reason string, halts bool) error {
	p.Node = h.c.cfg.Node
	_, err := h.close(ctx, p, outcome, reason, halts)
	return err
}

func (h *Hold) close(ctx context.Context, p Progress, outcome, reason string, halts bool) (Progress, error) {
	now := time.Now().UTC()
	p.Outcome, p.Phase, p.Reason, p.Updated = outcome, outcome, reason, now
	v, err := encode(p)
	if err != nil {
		return p, err
	}
	ops := []clientv3.Op{clientv3.OpPut(nodesPrefix+h.c.cfg.Node, v)}
	if halts {
		hv, err := encode(Halt{Node: h.c.cfg.Node, Txn: p.Txn, Outcome: outcome, Reason: reason, At: now})
		if err != nil {
			return p, err
		}
		ops = append(ops, clientv3.OpPut(haltKey, hv))
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if _, err := h.c.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		return p, fmt.Errorf("%w: record the end (%s) of transaction %s: %v", ErrUnreachable, outcome, p.Txn, err)
	}
	return p, nil
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

// View is the cluster's rollout state, read while this node holds the lock.
func (h *Hold) View(ctx context.Context) (*View, error) { return h.c.View(ctx) }

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
