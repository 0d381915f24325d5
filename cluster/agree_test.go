package cluster_test

// The cluster and a node's journal agree on its open transaction.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// A resume of a transaction the cluster recorded as this node's is its
// own, halt or not; one the cluster has no record of (the node crashed
// between its journal's begin and the cluster's) is checked for the halt
// as a new transaction is.
func TestResumeOfAnUnrecordedTxnChecksTheHalt(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", nil)
	h := acquire(t, co, "upgrade", "")
	if err := h.Begin(context.Background(), cluster.Progress{Txn: "recorded", Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	h.Release()
	// The halt of an earlier transaction of another node, put by hand:
	// while node-1's is open no other node may begin one.
	if _, err := c.Client(t).Put(context.Background(), cluster.Prefix+"halt", `{"node":"node-2","txn":"t-2","outcome":"rolled-back","reason":"x","at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	h = acquire(t, co, "upgrade", "recorded")
	h.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := co.Acquire(ctx, "upgrade", "unrecorded")
	var halted *cluster.HaltedError
	if !errors.As(err, &halted) || halted.Halt.Node != "node-2" {
		t.Fatalf("resume of a transaction the cluster never recorded, rollout halted: %v; want refused by node-2's halt", err)
	}
}

// A begin whose write reports an error after it took effect (a timeout
// after etcd applied it) is read back: the transaction is recorded, and
// its end is written as for any other.
func TestBeginReadBackAfterAFailedWrite(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", nil)
	h := acquire(t, co, "upgrade", "")
	defer h.Release()
	cluster.SetBeginReported(h, context.DeadlineExceeded)
	if err := h.Begin(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatalf("begin that took effect though its write reported an error: %v; want recorded", err)
	}
	if err := h.End(context.Background(), "committed", ""); err != nil {
		t.Fatal(err)
	}
	p, err := co.Node(context.Background(), "node-1")
	if err != nil || p == nil || p.Txn != "t1" || p.Outcome != "committed" {
		t.Fatalf("node-1's progress: %+v %v; want t1 committed", p, err)
	}
}

// A begin whose write fails and whose read-back fails too is
// ErrBeginUnknown: the caller must not take it as never recorded.
func TestBeginUnknownWhenEtcdIsGone(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", nil)
	h := acquire(t, co, "upgrade", "")
	for _, m := range c.Members {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	err := h.Begin(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"})
	if !errors.Is(err, cluster.ErrBeginUnknown) && !errors.Is(err, cluster.ErrBeginNotSent) {
		t.Fatalf("begin with etcd gone: %v; want ErrBeginUnknown or ErrBeginNotSent", err)
	}
}
