package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// The set-ups shared with package cluster's tests (nodes_test.go).
var (
	connect = cluster.ConnectNode
	acquire = cluster.AcquireNow
)

func TestConnectUsesEveryMember(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 1, "node-2", nil)
	eps := co.Endpoints()
	if len(eps) != 3 || eps[0] != c.Members[1].ClientURL {
		t.Fatalf("endpoints %v: want the local member first, then the other two of %v", eps, c.Endpoints())
	}
}

// TestConnectWaitsOutAnElection pins a rule Connect relies on: a member
// that knows no leader for a moment (two of three members gone, one back
// a moment later) is asked again by etcd's client until the dial timeout
// (its retry of Unavailable), not reported unreachable at once, which
// would send the engine to a member count kept from before.
func TestConnectWaitsOutAnElection(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	for _, m := range c.Members[1:] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	cli := c.Client(t, c.Members[0])
	for deadline := time.Now().Add(20 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, c.Members[0].ClientURL)
		cancel()
		if err == nil && st.Leader == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still knows a leader 20s after two of three members were killed: %+v %v", c.Members[0].Name, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	type connected struct {
		co  *cluster.Coordinator
		err error
	}
	got := make(chan connected, 1)
	go func() {
		co, err := cluster.Connect(context.Background(), cluster.Config{Local: etcddata.ClientConfig{Endpoint: c.Members[0].ClientURL, DialTimeout: 30 * time.Second}, Node: "node-1"})
		got <- connected{co, err}
	}()
	if err := c.Members[1].Start(); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("connect while the member knew no leader for a moment: %v; want it to wait for the election", r.err)
	}
	defer r.co.Close()
	if n := r.co.Members().Count; n != 3 {
		t.Fatalf("member count %d, want 3", n)
	}
}

// Two nodes at once: the second waits for the first, is told who holds the
// lock, and gets it once the first has released it.
func TestAcquireSerializes(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	one := connect(t, c, 0, "node-1", nil)
	waited := make(chan cluster.Holder, 1)
	two := connect(t, c, 1, "node-2", func(cfg *cluster.Config) { cfg.Waiting = func(h cluster.Holder) { waited <- h } })

	h1 := acquire(t, one, "upgrade", "")
	if err := h1.Begin(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var h2 *cluster.Hold
	go func() {
		var err error
		h2, err = two.Acquire(context.Background(), "upgrade", "")
		got <- err
	}()
	select {
	case h := <-waited:
		if h.Node != "node-1" || h.Kind != "upgrade" {
			t.Fatalf("waiting for %+v, want node-1's upgrade", h)
		}
	case err := <-got:
		t.Fatalf("node-2 took the lock while node-1 held it (err %v)", err)
	case <-time.After(20 * time.Second):
		t.Fatal("node-2 neither waited nor acquired")
	}
	h1.Phase(context.Background(), "applying")
	if err := h1.End(context.Background(), "committed", ""); err != nil {
		t.Fatal(err)
	}
	h1.Release()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("node-2 did not get the lock after node-1 released it")
	}
	defer h2.Release()
	v, err := two.View(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Nodes) != 1 || v.Nodes[0].Node != "node-1" || v.Nodes[0].Outcome != "committed" || v.Nodes[0].Open() || v.Halt != nil {
		t.Fatalf("view %+v: want node-1 committed, no halt", v)
	}
	if v.Holder == nil || v.Holder.Node != "node-2" {
		t.Fatalf("holder %+v, want node-2", v.Holder)
	}
}

// A node that dies mid-transaction loses the lock with its lease, but its
// open transaction still owns the rollout: another node waits, naming it,
// and gives up after its Wait with a BusyError; one that waits long enough
// begins once that node's resume has ended the transaction.
func TestOpenTransactionOwnsTheRollout(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 3, "3.6")
	one := connect(t, c, 0, "node-1", nil)
	cluster.OpenTxn(t, one, "t1")
	one.Close() // a crash: no Release, the lease expires after its TTL

	var waitedFor []string
	impatient := connect(t, c, 2, "node-3", func(cfg *cluster.Config) {
		cfg.Wait = 4 * time.Second
		cfg.Waiting = func(h cluster.Holder) { waitedFor = append(waitedFor, h.Node) }
	})
	_, err := impatient.Acquire(context.Background(), "upgrade", "")
	var busy *cluster.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, cluster.ErrBusy) {
		t.Fatalf("node-3 acquire: %v, want BusyError", err)
	}
	if busy.Progress.Node != "node-1" || busy.Progress.Txn != "t1" || busy.Progress.Phase != "applying" || !strings.Contains(err.Error(), "stratum-upgrade resume") {
		t.Fatalf("busy: %+v / %v", busy.Progress, err)
	}
	if len(waitedFor) == 0 || waitedFor[len(waitedFor)-1] != "node-1" {
		t.Fatalf("node-3 was told it waits for %v, want node-1", waitedFor)
	}

	patient := connect(t, c, 1, "node-2", nil)
	got := cluster.AcquireLater(patient)
	cluster.StillWaits(t, got, 3*time.Second, "node-2", "node-1's transaction is open")
	again := connect(t, c, 0, "node-1", nil)
	h := acquire(t, again, "upgrade", "t1")
	if err := h.Resumed(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "applying"}); err != nil {
		t.Fatal(err)
	}
	if err := h.End(context.Background(), "committed", ""); err != nil {
		t.Fatal(err)
	}
	h.Release()
	cluster.AcquiredWithin(t, got, 20*time.Second, "node-2", "node-1's resume committed")
}

// A rollback halts the rollout for every node, the one that rolled back
// too, until ClearHalt.
func TestRollbackHaltsTheRollout(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	one := connect(t, c, 0, "node-1", nil)
	h := acquire(t, one, "upgrade", "")
	if err := h.Begin(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	if err := h.End(context.Background(), "rolled-back", "kube-apiserver did not answer"); err != nil {
		t.Fatal(err)
	}
	h.Release()
	for i, node := range []string{"node-1", "node-2"} {
		co := connect(t, c, i, node, nil)
		_, err := co.Acquire(context.Background(), "upgrade", "")
		var halted *cluster.HaltedError
		if !errors.As(err, &halted) || halted.Halt.Node != "node-1" || halted.Halt.Txn != "t1" || halted.Halt.Outcome != "rolled-back" {
			t.Fatalf("%s acquire: %v, want the halt of node-1's t1", node, err)
		}
		for _, want := range []string{"kube-apiserver did not answer", "clear-halt"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
		}
	}
	two := connect(t, c, 1, "node-2", nil)
	cleared, err := two.ClearHalt(context.Background())
	if err != nil || cleared == nil || cleared.Txn != "t1" {
		t.Fatalf("clear: %+v, %v", cleared, err)
	}
	if again, err := two.ClearHalt(context.Background()); err != nil || again != nil {
		t.Fatalf("second clear: %+v, %v; want nothing to clear", again, err)
	}
	acquire(t, two, "upgrade", "").Release()
}

func TestLockTimeoutNamesTheHolder(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	h := acquire(t, connect(t, c, 0, "node-1", nil), "restart", "")
	defer h.Release()
	two := connect(t, c, 1, "node-2", func(cfg *cluster.Config) { cfg.Wait = time.Second })
	_, err := two.Acquire(context.Background(), "upgrade", "")
	if !errors.Is(err, cluster.ErrLockTimeout) || !strings.Contains(err.Error(), "node-1") {
		t.Fatalf("acquire: %v, want a lock timeout naming node-1", err)
	}
}

// A lease lost between Acquire and Begin (revoked here, as an expiry would)
// fails Begin: nothing is recorded under a lock the node no longer holds.
func TestBeginNeedsTheLock(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", nil)
	h := acquire(t, co, "upgrade", "")
	defer h.Release()
	cli := c.Client(t)
	r, err := cli.Get(context.Background(), cluster.Prefix+"lock", clientv3.WithPrefix())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("lock keys: %v %v", r, err)
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	err = h.Begin(context.Background(), cluster.Progress{Txn: "t1", Kind: "upgrade", Phase: "planned"})
	if !errors.Is(err, cluster.ErrLockTimeout) {
		t.Fatalf("begin after the lease was revoked: %v", err)
	}
	if p, err := co.Node(context.Background(), "node-1"); err != nil || p != nil {
		t.Fatalf("node-1's progress %+v (%v), want none", p, err)
	}
}

// A value the package did not write is an error naming its key.
func TestViewRefusesForeignValues(t *testing.T) {
	c := etcdcluster.Start(t, 1, "3.6")
	if _, err := c.Client(t).Put(context.Background(), cluster.Prefix+"nodes/x", "{not json"); err != nil {
		t.Fatal(err)
	}
	_, err := connect(t, c, 0, "node-1", nil).View(context.Background())
	if err == nil || !strings.Contains(err.Error(), cluster.Prefix+"nodes/x") {
		t.Fatalf("view: %v", err)
	}
}

// A cluster that loses quorum for a moment (two members restarting) fails
// requests; Acquire retries them and gets the lock once etcd answers again.
func TestAcquireRetriesWhileEtcdRecovers(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", nil)
	for _, m := range c.Members[1:] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	got := cluster.AcquireLater(co)
	time.Sleep(3 * time.Second)
	for _, m := range c.Members[1:] {
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
	}
	cluster.AcquiredWithin(t, got, 90*time.Second, "node-1", "etcd recovered")
}

// A cluster that stays without quorum: Acquire gives up after Unreachable
// with ErrUnreachable, saying for how long.
func TestAcquireGivesUpOnAnUnreachableCluster(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 3, "3.6")
	co := connect(t, c, 0, "node-1", func(cfg *cluster.Config) { cfg.Unreachable = time.Second })
	for _, m := range c.Members[1:] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := co.Acquire(context.Background(), "upgrade", "")
	if !errors.Is(err, cluster.ErrUnreachable) || !strings.Contains(err.Error(), "(for ") {
		t.Fatalf("acquire without quorum: %v, want ErrUnreachable", err)
	}
}
