package etcddata

// Issue 37 defects D and E on real etcd 3.6 clusters: only etcd's own
// refusal is a refusal, and a cancel is reported from etcd's status read
// back, never from the cancel's answer alone.

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// twoMembers is a two-member etcd 3.6 cluster (losing one member loses
// quorum) and the client config of its first member, with a short timeout.
//
// It returns once the cluster's storage version is 3.6. A new etcd 3.6
// member reports storage 3.5 until the cluster has agreed on its cluster
// version (etcd's storage version monitor moves it up), and a downgrade to
// 3.5 asked before then is done already: Downgrade returns nil at once.
// Under load that took long enough to fail TestDowngradeTimeoutIsNotARefusal.
func twoMembers(t *testing.T) (*etcdcluster.Cluster, ClientConfig) {
	t.Helper()
	c := etcdcluster.Start(t, 2, "3.6")
	cfg := ClientConfig{Endpoint: c.Members[0].ClientURL, DialTimeout: 2 * time.Second}
	cli, _, err := cfg.dial(etcdCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := cli.Status(etcdCtx(t), cfg.Endpoint)
		if err == nil && strings.HasPrefix(st.StorageVersion, "3.6") {
			return c, cfg
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting 30s for the new cluster's storage version 3.6: last %v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A downgrade etcd cannot answer (its cluster lost quorum: the validate's
// linearizable read times out) is unanswered, not refused: before the fix
// every error of validate or enable was ErrDowngradeRefused, and a single
// member restored its backup over acknowledged writes.
func TestDowngradeTimeoutIsNotARefusal(t *testing.T) {
	c, cfg := twoMembers(t)
	if err := c.Members[1].Kill(); err != nil {
		t.Fatal(err)
	}
	_, err := Downgrade(etcdCtx(t), cfg, "3.5", 5*time.Second, nil)
	if err == nil || errors.Is(err, ErrDowngradeRefused) || !errors.Is(err, ErrDowngradeUnanswered) {
		t.Fatalf("downgrade without quorum: %v; want ErrDowngradeUnanswered, not a refusal", err)
	}
}

// etcd's own refusal (a target that is not one minor below the cluster
// version) is ErrDowngradeRefused, and nothing is enabled.
func TestDowngradeInvalidTargetIsARefusal(t *testing.T) {
	_, cfg := twoMembers(t)
	got, err := Downgrade(etcdCtx(t), cfg, "3.4", 5*time.Second, nil)
	if !errors.Is(err, ErrDowngradeRefused) || errors.Is(err, ErrDowngradeUnanswered) || got.Enabled {
		t.Fatalf("downgrade of 3.6 to 3.4: %+v %v; want ErrDowngradeRefused, nothing enabled", got, err)
	}
	if on, err := DowngradeEnabled(etcdCtx(t), cfg); err != nil || on != "" {
		t.Errorf("after the refusal etcd downgrades to %q (%v), want none", on, err)
	}
}

// A cancel etcd 3.6 cannot carry out (no quorum) answers success all the
// same; CancelDowngrade reads the status back and says it is still
// enabled. With quorum back, it cancels, and says so truthfully.
func TestCancelDowngradeReadsBack(t *testing.T) {
	c, cfg := twoMembers(t)
	got, err := Downgrade(etcdCtx(t), cfg, "3.5", time.Nanosecond, nil)
	if !got.Enabled || (err != nil && !errors.Is(err, ErrDowngradeUnanswered)) {
		t.Fatalf("enable with a wait of 1ns: %+v %v; want it enabled (the storage wait unanswered, or done)", got, err)
	}
	if err := c.Members[1].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := CancelDowngrade(etcdCtx(t), cfg, "3.5"); !errors.Is(err, ErrDowngradeStillEnabled) {
		t.Fatalf("cancel without quorum: %v; want ErrDowngradeStillEnabled", err)
	}
	if err := c.Members[1].Start(); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(t)
	if err := CancelDowngrade(etcdCtx(t), cfg, "3.5"); err != nil {
		t.Fatalf("cancel with quorum: %v", err)
	}
	if on, err := DowngradeEnabled(etcdCtx(t), cfg); err != nil || on != "" {
		t.Errorf("after the cancel etcd downgrades to %q (%v), want none", on, err)
	}
}
