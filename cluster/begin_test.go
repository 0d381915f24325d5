package cluster_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// A begin whose write commits after its read-back found it missing (the
// node then rolls back) changes nothing: the read-back fenced the record
// off as rolled back, without a halt, and the late write fails its compare.
// It used to land and leave the transaction open in the cluster, every
// other node waiting for a transaction that did nothing (issue 37, G).
func TestBeginLateWriteChangesNothing(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", nil)
	h := acquire(t, co, "upgrade", "")
	defer h.Release()
	land := cluster.SetBeginLate(h, context.DeadlineExceeded)
	err := h.Begin(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"})
	if !errors.Is(err, cluster.ErrUnreachable) || errors.Is(err, cluster.ErrBeginUnknown) {
		t.Fatalf("begin read back as not recorded: %v; want ErrUnreachable (not recorded)", err)
	}
	landed, err := land()
	if err != nil {
		t.Fatal(err)
	}
	if landed {
		t.Error("the begin's write that came after its read-back took effect")
	}
	p, err := co.Node(context.Background(), "node-1")
	if err != nil || p == nil || p.Txn != "t1" || p.Open() || p.Outcome != "rolled-back" {
		t.Fatalf("node-1's progress: %+v %v; want t1 closed rolled back", p, err)
	}
	v, err := co.View(context.Background())
	if err != nil || v.Halt != nil {
		t.Fatalf("view: halt %+v %v; want none: the transaction did nothing", v.Halt, err)
	}
	// The next transaction begins on the fenced record.
	if err := h.Begin(context.Background(), cluster.Progress{Txn: "t2", Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatalf("the next begin: %v", err)
	}
	if p, err := co.Node(context.Background(), "node-1"); err != nil || p == nil || p.Txn != "t2" || !p.Open() {
		t.Fatalf("node-1's progress: %+v %v; want t2 open", p, err)
	}
}

// Close records the end of a stale open record with the journal's
// outcome; a transaction that did nothing closes without a halt.
func TestCloseWithoutHalt(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", nil)
	h := acquire(t, co, "upgrade", "")
	defer h.Release()
	if err := h.Begin(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	p, err := co.Node(context.Background(), "node-1")
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	if err := h.Close(context.Background(), *p, "rolled-back", "nothing changed", false); err != nil {
		t.Fatal(err)
	}
	v, err := co.View(context.Background())
	if err != nil || v.Halt != nil {
		t.Fatalf("halt %+v %v; want none", v.Halt, err)
	}
	if p, _ := co.Node(context.Background(), "node-1"); p == nil || p.Open() || p.Outcome != "rolled-back" {
		t.Fatalf("node-1's progress %+v; want closed rolled back", p)
	}
}
