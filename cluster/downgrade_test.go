package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// While etcd downgrades, a halt lets through exactly a rollback --last that
// moves this node's etcd down to the downgrade's minor: not before the
// downgrade is enabled, not another kind, not another minor; and another
// node's open transaction still makes it wait.
func TestHaltLetsTheEtcdDowngradeThrough(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 3, "3.6")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one := connect(t, c, 0, "node-1", nil)
	h := acquire(t, one, "upgrade", "")
	if err := h.Begin(ctx, cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	if err := h.End(ctx, "rolled-back", "kube-scheduler did not answer"); err != nil {
		t.Fatal(err)
	}
	h.Release()
	short := func(cfg *cluster.Config) { cfg.Wait = 2 * time.Second }
	two := connect(t, c, 1, "node-2", short)
	halted := func(kind, down string) bool {
		t.Helper()
		h, err := two.AcquireEtcdDown(ctx, kind, "", down)
		if err == nil {
			h.Release()
			return false
		}
		var he *cluster.HaltedError
		if !errors.As(err, &he) {
			t.Fatalf("%s down to %q: %v, want the halt or the lock", kind, down, err)
		}
		return true
	}
	if !halted(cluster.KindRollbackLast, "3.5") {
		t.Fatal("a rollback --last got through the halt with no etcd downgrade enabled")
	}
	cli := c.Client(t)
	for _, a := range []clientv3.DowngradeAction{clientv3.DowngradeValidate, clientv3.DowngradeEnable} {
		if _, err := cli.Downgrade(ctx, a, "3.5.0"); err != nil {
			t.Fatalf("downgrade %v: %v", a, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := two.EtcdDowngrade(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d != nil {
			if d.Target != "3.5.0" || len(d.Members) != 3 {
				t.Fatalf("downgrade %+v, want to 3.5.0 with three members", d)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd never reported the downgrade enabled")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range []struct {
		kind, down string
		through    bool
	}{
		{"upgrade", "3.5", false},
		{cluster.KindRollbackLast, "", false},
		{cluster.KindRollbackLast, "3.4", false},
		{cluster.KindRollbackLast, "3.5", true},
	} {
		if got := !halted(c.kind, c.down); got != c.through {
			t.Errorf("%s down to %q: through the halt %v, want %v", c.kind, c.down, got, c.through)
		}
	}
	// node-3's rollback --last is open: node-2's waits for it, halt or not.
	three := connect(t, c, 2, "node-3", nil)
	h3, err := three.AcquireEtcdDown(ctx, cluster.KindRollbackLast, "", "3.5")
	if err != nil {
		t.Fatal(err)
	}
	if err := h3.Begin(ctx, cluster.Progress{Txn: "t3", Kind: cluster.KindRollbackLast, Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	h3.Release()
	_, err = two.AcquireEtcdDown(ctx, cluster.KindRollbackLast, "", "3.5")
	var busy *cluster.BusyError
	if !errors.As(err, &busy) || busy.Progress.Node != "node-3" {
		t.Fatalf("node-2 with node-3's transaction open: %v, want busy naming node-3", err)
	}
}
