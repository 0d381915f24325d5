package cluster

// The begin of a transaction in the cluster: written once per transaction
// id, and never after the node decided it was not recorded.

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrBeginUnknown: the write of a transaction's begin failed and reading it
// back failed too, so whether the cluster recorded it is unknown; the
// caller must neither go on nor roll back as though it was never recorded.
var ErrBeginUnknown = errors.New("whether the cluster recorded the transaction is unknown")

// ErrBeginNotSent: the cluster could not be read before a transaction's
// begin was written, so nothing was written. A transport error, not a
// refusal: the caller pauses, as for ErrBeginUnknown, and resumes later.
var ErrBeginNotSent = errors.New("the cluster could not be reached to record the transaction; nothing was written")

// notRecorded is the reason of the record that fences off a begin the
// cluster did not record: the node rolls it back before it changed anything.
const notRecorded = "the cluster did not record its begin, so this node rolled it back before changing anything"

// Begin records the node's transaction as open, only while this node holds
// the lock (a lease that expired since Acquire fails it). The write lands
// only on the record it read first (a compare on its revision): a write of
// the same transaction sent again, or one that commits after the read-back
// found it missing, changes nothing. A begin read back as not recorded is
// fenced off: the record is closed for p.Txn, so a late write fails its
// compare, and the node rolls back with the cluster agreeing.
func (h *Hold) Begin(ctx context.Context, p Progress) error {
	key := nodesPrefix + h.c.cfg.Node
	now := time.Now().UTC()
	p.Node, p.Started, p.Updated, p.Outcome = h.c.cfg.Node, now, now, ""
	v, err := encode(p)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	g, err := h.c.cli.Get(rctx, key)
	if err != nil {
		return fmt.Errorf("%w: transaction %s: read %s: %v", ErrBeginNotSent, p.Txn, key, err)
	}
	rev := int64(0)
	if len(g.Kvs) > 0 {
		rev = g.Kvs[0].ModRevision
	}
	send := func(ctx context.Context) (*clientv3.TxnResponse, error) {
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		defer cancel()
		return h.c.cli.Txn(wctx).If(h.m.IsOwner(), clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, v)).Else(clientv3.OpGet(key)).Commit()
	}
	var r *clientv3.TxnResponse
	if late := h.beginLate; late != nil {
		h.beginLate, late.send, err = nil, send, late.err
	} else {
		r, err = send(ctx)
	}
	if err == nil && h.beginReported != nil {
		h.beginReported, err = nil, h.beginReported
	}
	if err != nil {
		return h.settleBegin(ctx, p, rev, err)
	}
	if !r.Succeeded {
		if cur := elseProgress(r, key); cur != nil && cur.Txn == p.Txn && cur.Open() {
			h.progress = *cur // the same begin, recorded already
			return nil
		}
		return fmt.Errorf("%w: this node's lease expired, or its record changed, before transaction %s was recorded; run it again", ErrLockTimeout, p.Txn)
	}
	h.progress = p
	return nil
}

// settleBegin decides a begin whose write reported werr from what the
// cluster holds: recorded (a write that timed out but took effect), not
// recorded (fenced off, so that the write cannot land later), or unknown.
func (h *Hold) settleBegin(ctx context.Context, p Progress, rev int64, werr error) error {
	cur, rerr := h.readBack(ctx)
	switch {
	case rerr != nil:
		return fmt.Errorf("%w: transaction %s: the write failed (%v) and reading it back failed too (%v)", ErrBeginUnknown, p.Txn, werr, rerr)
	case cur != nil && cur.Txn == p.Txn && cur.Open():
		h.c.cfg.Log.Info("the write of the transaction's begin reported an error but took effect", "txn", p.Txn, "err", werr)
		h.progress = *cur
		return nil
	}
	// Not recorded: close the record for p.Txn on the revision read, so a
	// write still on its way fails its compare.
	key := nodesPrefix + h.c.cfg.Node
	closed := p
	closed.Outcome, closed.Phase, closed.Reason, closed.Updated = "rolled-back", "rolled-back", notRecorded, time.Now().UTC()
	v, err := encode(closed)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	f, ferr := h.c.cli.Txn(fctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, v)).Else(clientv3.OpGet(key)).Commit()
	switch {
	case ferr != nil:
		// The write may still land: the next command on this node closes
		// it from the journal (the engine's closeStale).
		h.c.cfg.Log.Warn("could not fence off the begin the cluster did not record; the next command here closes it if it lands", "txn", p.Txn, "err", ferr)
	case !f.Succeeded:
		if cur := elseProgress(f, key); cur != nil && cur.Txn == p.Txn && cur.Open() {
			h.c.cfg.Log.Info("the write of the transaction's begin landed after its read-back", "txn", p.Txn, "err", werr)
			h.progress = *cur
			return nil
		}
	}
	return fmt.Errorf("%w: record transaction %s: %v (read back: not recorded)", ErrUnreachable, p.Txn, werr)
}

// elseProgress is the progress an Else(OpGet(key)) branch read; nil when
// the key was absent or does not decode.
func elseProgress(r *clientv3.TxnResponse, key string) *Progress {
	for _, op := range r.Responses {
		if g := op.GetResponseRange(); g != nil && len(g.Kvs) > 0 {
			p, err := decode[Progress](key, g.Kvs[0].Value)
			if err == nil {
				return &p
			}
		}
	}
	return nil
}

// lateWrite holds back Begin's write (tests only): err is what Begin
// reports in its place, send is the write, for the test to send later.
type lateWrite struct {
	err  error
	send func(context.Context) (*clientv3.TxnResponse, error)
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
