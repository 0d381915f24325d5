package engine

// Issue 37 defect E on a real etcd: a downgrade this transaction enabled
// does not stay enabled after a crash.

import (
	"errors"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// A rollback --last (etcd 3.6 -> 3.5) crashes right after real etcd 3.6
// enabled the downgrade; the operator's rollback cancels it, and etcd's
// status, read back, reports none enabled, etcd 3.6 serving.
func TestRealEtcdDowngradeCancelledAfterACrash(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	if res, err := f.e.Run(t.Context(), release(f.node.State, true, "", ""), nil); err != nil || res.Outcome != Committed {
		t.Fatalf("upgrade to etcd 3.6: %+v %v", res, err)
	}
	if !stopAt(f.e, fault.AfterEtcdDowngradeEnabled, func() { f.e.RollbackLast(t.Context()) }) {
		t.Fatal("the rollback --last never reached after-etcd-downgrade-enabled")
	}
	cfg := etcddata.Endpoint(f.node.State)
	if on, err := etcddata.DowngradeEnabled(t.Context(), cfg); err != nil || !strings.HasPrefix(on, "3.5") {
		t.Fatalf("after the crash etcd downgrades to %q (%v): the test does not exercise an enabled downgrade", on, err)
	}
	res, err := f.e.Rollback(t.Context(), "operator")
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("rollback: %+v %v, want rolled back", res, err)
	}
	if on, err := etcddata.DowngradeEnabled(t.Context(), cfg); err != nil || on != "" {
		t.Errorf("after the rollback etcd downgrades to %q (%v), want none", on, err)
	}
	if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, "3.6.") {
		t.Errorf("etcd serves %s after the rollback, want 3.6", v)
	}
}
