package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// progressKey is node's progress key and its revision, read directly.
func progressKey(t *testing.T, cli *clientv3.Client, node string) (Progress, int64) {
	t.Helper()
	r, err := cli.Get(context.Background(), nodesPrefix+node)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("%s's progress: %v (%d keys)", node, err, len(r.Kvs))
	}
	p, err := decode[Progress](nodesPrefix+node, r.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return p, r.Kvs[0].ModRevision
}

// A node that died mid-transaction holds the rollout: another node waits
// for it. Forget is refused while its lease holds the lock (naming the
// lease and when it runs out), then, once the lease has expired, closes
// its transaction with who and why, and the waiting node goes on by itself.
func TestForgetLetsTheRolloutGoOn(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 1, "3.6")
	one := ConnectNode(t, c, 0, "node-1", nil)
	OpenTxn(t, one, "t1")
	two := ConnectNode(t, c, 0, "node-2", nil)

	_, err := two.Forget(context.Background(), "node-1", "its disk died")
	var alive *AliveError
	if !errors.As(err, &alive) || !errors.Is(err, ErrNodeAlive) {
		t.Fatalf("forget while node-1 holds the lock: %v, want an *AliveError", err)
	}
	if alive.Node != "node-1" || alive.Lease == clientv3.NoLease || !alive.Expires.After(time.Now()) || alive.Expires.After(time.Now().Add(4*time.Second)) {
		t.Fatalf("alive: %+v, want node-1's lease, expiring within its 2 s TTL", alive)
	}
	for _, want := range []string{"node-1", "lease", "until", "nothing was changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if p, _ := progressKey(t, c.Client(t), "node-1"); !p.Open() || p.Phase != "applying" {
		t.Fatalf("a refused forget changed node-1's progress: %+v", p)
	}

	one.Close() // node-1 dies: no Release, its lease expires after 2 s
	three := ConnectNode(t, c, 0, "node-3", func(cfg *Config) { cfg.Wait = 45 * time.Second })
	waited := AcquireLater(three)
	StillWaits(t, waited, 4*time.Second, "node-3", "node-1's transaction is open") // past node-1's lease

	// node-3's waiting takes and drops the lock every second meanwhile:
	// Forget rides that out.
	res, err := two.Forget(context.Background(), "node-1", "its disk died")
	if err != nil {
		t.Fatalf("forget after node-1's lease expired: %v", err)
	}
	if res.After == nil || res.Before.Txn != "t1" || !res.Before.Open() || res.Halt != nil {
		t.Fatalf("result %+v, want node-1's open t1 closed", res)
	}
	p, rev := progressKey(t, c.Client(t), "node-1")
	f := p.Forgotten
	if p.Open() || p.Outcome != OutcomeForgotten || p.Txn != "t1" || f == nil || f.By != "node-2" || f.Reason != "its disk died" || f.Phase != "applying" ||
		!strings.Contains(p.Reason, "node-2") || !strings.Contains(p.Reason, "its disk died") || rev != res.Revision {
		t.Fatalf("node-1's progress after forget (revision %d, result's %d): %+v %+v", rev, res.Revision, p, f)
	}
	AcquiredWithin(t, waited, 20*time.Second, "node-3", "node-1 was forgotten")

	// Forgetting it again is nothing to do, and writes nothing.
	again, err := two.Forget(context.Background(), "node-1", "again")
	if err != nil || again.After != nil || again.Before.Outcome != OutcomeForgotten {
		t.Fatalf("second forget: %+v, %v; want nothing to do", again, err)
	}
	if _, rev2 := progressKey(t, c.Client(t), "node-1"); rev2 != rev {
		t.Fatalf("nothing to do wrote node-1's progress (revision %d -> %d)", rev, rev2)
	}
}

// Bad input changes nothing: a node the cluster has no record of (the
// error lists the ones it has), this node itself, no reason, a node whose
// transaction ended.
func TestForgetRefusesBadInput(t *testing.T) {
	c := etcdcluster.Start(t, 1, "3.6")
	two := ConnectNode(t, c, 0, "node-2", nil)
	h := OpenTxn(t, two, "t2")
	if err := h.End(context.Background(), "committed", ""); err != nil {
		t.Fatal(err)
	}
	h.Release()
	one := ConnectNode(t, c, 0, "node-1", nil)
	OpenTxn(t, one, "t1").Release()
	cli := c.Client(t)
	_, rev1 := progressKey(t, cli, "node-1")
	_, rev2 := progressKey(t, cli, "node-2")

	_, err := one.Forget(context.Background(), "node-9", "typo")
	var unknown *UnknownNodeError
	if !errors.As(err, &unknown) || !errors.Is(err, ErrUnknownNode) || strings.Join(unknown.Known, ",") != "node-1,node-2" {
		t.Fatalf("forget node-9: %v (%+v), want an *UnknownNodeError listing node-1 and node-2", err, unknown)
	}
	if _, err := one.Forget(context.Background(), "node-1", "me"); !errors.Is(err, ErrForgetSelf) {
		t.Fatalf("node-1 forgetting itself: %v, want ErrForgetSelf", err)
	}
	for _, reason := range []string{"", "  "} {
		if _, err := two.Forget(context.Background(), "node-1", reason); err == nil || !strings.Contains(err.Error(), "reason is required") {
			t.Fatalf("forget with reason %q: %v", reason, err)
		}
	}
	if _, err := two.Forget(context.Background(), "", "x"); err == nil {
		t.Fatal("forget of no node: no error")
	}
	res, err := one.Forget(context.Background(), "node-2", "done already")
	if err != nil || res.After != nil || res.Before.Outcome != "committed" {
		t.Fatalf("forget of a node whose transaction committed: %+v, %v; want nothing to do", res, err)
	}
	if _, r := progressKey(t, cli, "node-1"); r != rev1 {
		t.Errorf("node-1's progress was written (revision %d -> %d)", rev1, r)
	}
	if _, r := progressKey(t, cli, "node-2"); r != rev2 {
		t.Errorf("node-2's progress was written (revision %d -> %d)", rev2, r)
	}
}

// The write compares what was read: a node that comes back between
// Forget's read and its write (its resume records its progress, or takes
// the lock) is not forgotten, and what it wrote stays.
func TestForgetLosesTheRaceToALiveNode(t *testing.T) {
	c := etcdcluster.Start(t, 1, "3.6")
	one := ConnectNode(t, c, 0, "node-1", nil)
	OpenTxn(t, one, "t1").Release() // as if its lease had expired
	two := ConnectNode(t, c, 0, "node-2", nil)
	t.Cleanup(func() { forgetSeam = nil })

	// Its resume writes its progress in between.
	forgetSeam = func() {
		forgetSeam = nil
		p := Progress{Node: "node-1", Txn: "t1", Kind: "upgrade", Phase: "rolling-back", Started: time.Now().UTC(), Updated: time.Now().UTC()}
		v, _ := encode(p)
		if _, err := c.Client(t).Put(context.Background(), nodesPrefix+"node-1", v); err != nil {
			t.Error(err)
		}
	}
	_, err := two.Forget(context.Background(), "node-1", "thought it dead")
	if !errors.Is(err, ErrNodeAlive) || !strings.Contains(err.Error(), "while it was being forgotten") {
		t.Fatalf("forget racing node-1's write: %v, want ErrNodeAlive", err)
	}
	if p, _ := progressKey(t, c.Client(t), "node-1"); p.Phase != "rolling-back" || !p.Open() {
		t.Fatalf("node-1's own write was overwritten: %+v", p)
	}

	// Its resume takes the lock in between.
	var h *Hold
	forgetSeam = func() {
		forgetSeam = nil
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var err error
		if h, err = ConnectNode(t, c, 0, "node-1", nil).Acquire(ctx, "upgrade", "t1"); err != nil {
			t.Error(err)
		}
	}
	_, err = two.Forget(context.Background(), "node-1", "thought it dead")
	var alive *AliveError
	if !errors.As(err, &alive) || alive.Kind != "upgrade" {
		t.Fatalf("forget racing node-1's lock: %v, want an *AliveError", err)
	}
	if h != nil {
		h.Release()
	}
	if p, _ := progressKey(t, c.Client(t), "node-1"); !p.Open() {
		t.Fatalf("node-1 was forgotten while it took the lock: %+v", p)
	}
}

// A forgotten node that was not dead after all no longer owns the
// rollout: its resume waits while another node's transaction is open,
// instead of driving its own beside it.
func TestForgottenNodeResumeWaitsItsTurn(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 1, "3.6")
	one := ConnectNode(t, c, 0, "node-1", func(cfg *Config) { cfg.Wait = 3 * time.Second })
	OpenTxn(t, one, "t1").Release()
	two := ConnectNode(t, c, 0, "node-2", nil)
	if _, err := two.Forget(context.Background(), "node-1", "unreachable for an hour"); err != nil {
		t.Fatal(err)
	}
	h2 := OpenTxn(t, two, "t2")
	h2.Release() // node-2's transaction stays open (a crash)

	_, err := one.Acquire(context.Background(), "upgrade", "t1")
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Progress.Node != "node-2" {
		t.Fatalf("node-1's resume of its forgotten t1: %v, want it to wait for node-2's t2", err)
	}
}
