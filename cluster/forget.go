package cluster

// Forgetting a node that died for good mid-transaction. Its open progress
// owns the rollout (keys.go) until its own resume ends it; a node that
// will never run again would hold every other node forever. Forget closes
// that progress in its place, with a record of who did it and why, but
// only while nothing says the node is alive: its lease does not hold the
// rollout lock, and its progress does not change between the read and the
// write (an etcd transaction comparing the key's revision).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// OutcomeForgotten is the outcome of a transaction Forget closed.
const OutcomeForgotten = "forgotten"

// forgetAttempts bounds the retries of a write whose comparison failed
// because another node's lock holder changed (waiting nodes take and drop
// the lock every second while the forgotten node's transaction is open).
const forgetAttempts = 5

// Errors Forget returns, each inside a typed error or with its context.
var (
	// ErrNodeAlive: something says the node is alive (its lease holds
	// the rollout lock, or it wrote its progress while it was being
	// forgotten). Nothing was changed.
	ErrNodeAlive = errors.New("the node is alive")
	// ErrUnknownNode: the cluster has no progress of that node.
	ErrUnknownNode = errors.New("the cluster has no record of the node")
	// ErrForgetSelf: a node's own open transaction is in its journal; its
	// resume or rollback ends it.
	ErrForgetSelf = errors.New("a node cannot forget itself")
)

// Forgotten is who closed a node's transaction in its place, and why.
type Forgotten struct {
	// By is the node that ran the command.
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// Phase is the phase the node last reported: how far it got.
	Phase string `json:"phase"`
}

// AliveError is ErrNodeAlive because the node's lease holds the rollout
// lock: it is running stratum-upgrade now.
type AliveError struct {
	Node string
	// Kind and Since are what the node says it holds the lock for.
	Kind  string
	Since time.Time
	Lease clientv3.LeaseID
	// Expires is when the lease runs out unless the node renews it, which
	// its stratum-upgrade does while it runs.
	Expires time.Time
}

func (e *AliveError) Error() string {
	return fmt.Sprintf("node %s is alive: its lease %x holds the rollout lock (%s, since %s) until %s unless renewed, and its stratum-upgrade renews it while it runs; nothing was changed",
		e.Node, int64(e.Lease), e.Kind, e.Since.UTC().Format(time.RFC3339), e.Expires.UTC().Format(time.RFC3339))
}
func (e *AliveError) Unwrap() error { return ErrNodeAlive }

// UnknownNodeError is ErrUnknownNode with the nodes the cluster knows.
type UnknownNodeError struct {
	Node  string
	Known []string
}

func (e *UnknownNodeError) Error() string {
	known := "none has recorded a transaction"
	if len(e.Known) > 0 {
		known = "the nodes it knows: " + strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("node %q: %v (%s); nothing was changed", e.Node, ErrUnknownNode, known)
}
func (e *UnknownNodeError) Unwrap() error { return ErrUnknownNode }

// ForgetResult is what Forget found and did.
type ForgetResult struct {
	// Before is the node's progress as Forget read it.
	Before Progress
	// After is the progress Forget wrote; nil when the node had no open
	// transaction (nothing to do).
	After *Progress
	// Revision is etcd's revision of the write, or of the read when there
	// was nothing to do.
	Revision int64
	// Halt is the rollout's halt, if one is set: forgetting does not
	// clear it.
	Halt *Halt
}

// Forget closes node's open transaction in the cluster's keys, so that the
// rollout can go on without it: its progress gets the outcome "forgotten"
// and a Forgotten record naming this node and reason. The node's own
// journal and manifests are not touched (they cannot be: it is gone).
//
// Refused, with nothing changed: this node itself (ErrForgetSelf), an
// empty reason, a node with no progress (*UnknownNodeError), a node whose
// lease holds the rollout lock (*AliveError), a node that writes its
// progress meanwhile (ErrNodeAlive). A node with no open transaction is
// nothing to do (After nil).
func (c *Coordinator) Forget(ctx context.Context, node, reason string) (*ForgetResult, error) {
	switch {
	case node == "":
		return nil, errors.New("forget: no node named")
	case node == c.cfg.Node:
		return nil, fmt.Errorf("forget %s: %w: its open transaction is in its own journal", node, ErrForgetSelf)
	case strings.TrimSpace(reason) == "":
		return nil, fmt.Errorf("forget %s: a reason is required: it is recorded with the node's closed transaction", node)
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	var first *Progress
	var firstRev int64
	for range forgetAttempts {
		s, err := c.readForget(ctx, node)
		if err != nil {
			return nil, err
		}
		if first == nil {
			first, firstRev = &s.progress, s.progressRev
		} else if s.progressRev != firstRev {
			return nil, fmt.Errorf("forget %s: %w: it wrote its progress (phase %s, outcome %s) while it was being forgotten; nothing was changed",
				node, ErrNodeAlive, s.progress.Phase, orNone(s.progress.Outcome))
		}
		res := &ForgetResult{Before: s.progress, Revision: s.rev, Halt: s.halt}
		if !s.progress.Open() {
			return res, nil
		}
		if err := c.alive(ctx, node, s); err != nil {
			return nil, err
		}
		after := s.progress
		now := time.Now().UTC()
		after.Forgotten = &Forgotten{By: c.cfg.Node, Reason: reason, At: now, Phase: s.progress.Phase}
		after.Outcome, after.Phase, after.Updated = OutcomeForgotten, OutcomeForgotten, now
		after.Reason = fmt.Sprintf("forgotten by %s: %s", c.cfg.Node, reason)
		v, err := encode(after)
		if err != nil {
			return nil, err
		}
		if forgetSeam != nil {
			forgetSeam()
		}
		r, err := c.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(nodesPrefix+node), "=", s.progressRev),
			// The holder as it was read: no lease of the node's took the
			// lock since.
			clientv3.Compare(clientv3.ModRevision(holderKey), "=", s.holderRev),
		).Then(clientv3.OpPut(nodesPrefix+node, v)).Commit()
		if err != nil {
			return nil, fmt.Errorf("%w: forget %s: %v", ErrUnreachable, node, err)
		}
		if r.Succeeded {
			res.After, res.Revision = &after, r.Header.Revision
			c.cfg.Log.Warn("forgot a node's open transaction", "node", node, "txn", after.Txn, "phase", after.Forgotten.Phase, "reason", reason)
			return res, nil
		}
		// Something moved between the read and the write: read again.
	}
	return nil, fmt.Errorf("forget %s: the rollout lock changed hands on every one of %d tries; nothing was changed; try again", node, forgetAttempts)
}

// forgetSeam, when set (by tests only: nothing in the product sets it), is
// called between Forget's read and its write, so a test can move a key in
// between as the node coming back would.
var forgetSeam func()

// forgetRead is the keys Forget decides from, read at one revision.
type forgetRead struct {
	rev         int64
	progress    Progress
	progressRev int64
	holder      *Holder
	holderRev   int64 // 0: no holder
	holderLease clientv3.LeaseID
	halt        *Halt
}

func (c *Coordinator) readForget(ctx context.Context, node string) (*forgetRead, error) {
	r, err := c.cli.Txn(ctx).Then(clientv3.OpGet(nodesPrefix+node), clientv3.OpGet(holderKey), clientv3.OpGet(haltKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrUnreachable, nodesPrefix+node, err)
	}
	s := &forgetRead{rev: r.Header.Revision}
	kvs := func(i int) []*mvccpb.KeyValue { return r.Responses[i].GetResponseRange().Kvs }
	pk := kvs(0)
	if len(pk) == 0 {
		return nil, c.unknown(ctx, node)
	}
	if s.progress, err = decode[Progress](nodesPrefix+node, pk[0].Value); err != nil {
		return nil, err
	}
	s.progressRev = pk[0].ModRevision
	if hk := kvs(1); len(hk) > 0 {
		h, err := decode[Holder](holderKey, hk[0].Value)
		if err != nil {
			return nil, err
		}
		s.holder, s.holderRev, s.holderLease = &h, hk[0].ModRevision, clientv3.LeaseID(hk[0].Lease)
	}
	if tk := kvs(2); len(tk) > 0 {
		h, err := decode[Halt](haltKey, tk[0].Value)
		if err != nil {
			return nil, err
		}
		s.halt = &h
	}
	return s, nil
}

// alive fails with an *AliveError when node's lease holds the rollout lock
// and etcd says the lease has time left.
func (c *Coordinator) alive(ctx context.Context, node string, s *forgetRead) error {
	if s.holder == nil || s.holder.Node != node || s.holderLease == clientv3.NoLease {
		return nil
	}
	ttl, err := c.cli.TimeToLive(ctx, s.holderLease)
	if err != nil {
		return fmt.Errorf("%w: the lease of node %s's rollout lock: %v", ErrUnreachable, node, err)
	}
	if ttl.TTL < 0 {
		return nil // expired (-1): its holder key goes with it
	}
	// etcd's TTL is whole seconds left, rounded down: 0 is still alive.
	return &AliveError{Node: node, Kind: s.holder.Kind, Since: s.holder.Since, Lease: s.holderLease,
		Expires: time.Now().Add(time.Duration(ttl.TTL+1) * time.Second)}
}

// unknown is the *UnknownNodeError for node, listing the nodes with a
// progress key.
func (c *Coordinator) unknown(ctx context.Context, node string) error {
	r, err := c.cli.Get(ctx, nodesPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("%w: read %s: %v", ErrUnreachable, nodesPrefix, err)
	}
	e := &UnknownNodeError{Node: node}
	for _, kv := range r.Kvs {
		e.Known = append(e.Known, strings.TrimPrefix(string(kv.Key), nodesPrefix))
	}
	return e
}

// forgotten reports whether txn, this node's own transaction being
// resumed, was closed by Forget: the node no longer owns the rollout, and
// its resume waits its turn (and respects a halt) like a new transaction.
func (h *Hold) forgotten(ctx context.Context, txn string) (bool, error) {
	p, err := h.c.Node(ctx, h.c.cfg.Node)
	if err != nil {
		return false, err
	}
	return p != nil && p.Txn == txn && p.Outcome == OutcomeForgotten, nil
}
