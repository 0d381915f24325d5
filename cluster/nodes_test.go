package cluster

// The set-ups both test packages of cluster share (package cluster's own
// tests and cluster_test's): a node's coordinator on a test cluster, a
// lock taken or an open transaction, and an Acquire left waiting.

import (
	"context"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// ConnectNode is node's coordinator through member m of c (plain http),
// with a 2 s lease and a minute's wait; mod adjusts its config. It is
// closed when t ends.
func ConnectNode(t *testing.T, c *etcdcluster.Cluster, m int, node string, mod func(*Config)) *Coordinator {
	t.Helper()
	cfg := Config{Local: etcddata.ClientConfig{Endpoint: c.Members[m].ClientURL, DialTimeout: 5 * time.Second}, Node: node, TTL: 2 * time.Second, Wait: time.Minute}
	if mod != nil {
		mod(&cfg)
	}
	co, err := Connect(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	return co
}

// AcquireNow is co's lock for kind (resuming resume, if any), within 30 s.
func AcquireNow(t *testing.T, co *Coordinator, kind, resume string) *Hold {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := co.Acquire(ctx, kind, resume)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// OpenTxn has co's node begin the upgrade txn and report phase applying,
// holding the lock; the caller releases it, or drops co as a crash would.
func OpenTxn(t *testing.T, co *Coordinator, txn string) *Hold {
	t.Helper()
	h := AcquireNow(t, co, "upgrade", "")
	if err := h.Begin(context.Background(), Progress{Txn: txn, Kind: "upgrade", Phase: "planned"}); err != nil {
		t.Fatal(err)
	}
	h.Phase(context.Background(), "applying")
	return h
}

// AcquireLater runs co's Acquire of an upgrade lock in the background,
// releasing the lock at once; the channel gets Acquire's error.
func AcquireLater(co *Coordinator) <-chan error {
	got := make(chan error, 1)
	go func() {
		h, err := co.Acquire(context.Background(), "upgrade", "")
		if err == nil {
			h.Release()
		}
		got <- err
	}()
	return got
}

// StillWaits stops t when got (AcquireLater's) returned within d: node
// took the lock, or gave up, where it must wait.
func StillWaits(t *testing.T, got <-chan error, d time.Duration, node, why string) {
	t.Helper()
	select {
	case err := <-got:
		t.Fatalf("%s acquired (%v) while %s", node, err, why)
	case <-time.After(d):
	}
}

// AcquiredWithin stops t unless got (AcquireLater's) returned no error
// within d, once after happened.
func AcquiredWithin(t *testing.T, got <-chan error, d time.Duration, node, after string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("%s after %s: %v", node, after, err)
		}
	case <-time.After(d):
		t.Fatalf("%s still waits %s after %s", node, d, after)
	}
}
