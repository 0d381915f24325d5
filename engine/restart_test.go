package engine

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// replacedOnly fails t unless exactly the components of want got new
// processes between before and after.
func replacedOnly(t *testing.T, st *nodestate.NodeState, before, after map[string][]proc.Process, want []string) {
	t.Helper()
	for _, comp := range manifest.NamesFor(st) {
		if replaced := !slices.Equal(before[comp], after[comp]); replaced != slices.Contains(want, comp) {
			t.Errorf("%s: processes %v before, %v after; replaced %v, want %v", comp, before[comp], after[comp], replaced, slices.Contains(want, comp))
		}
	}
}

// TestRestart restarts two components named out of roster order: the
// transaction (kind restart) replaces exactly those, in roster order, with
// the waits, takes no etcd backup although etcd is one of them, and
// commits with the node state unchanged. An unknown component is refused
// before anything is begun.
func TestRestart(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	if _, err := f.e.Restart(t.Context(), []string{"kube-proxy"}); !errors.Is(err, ErrUnknownComponent) {
		t.Fatalf("restart of kube-proxy: %v, want ErrUnknownComponent", err)
	}
	if h, err := f.j.History(0); err != nil || len(h) != 0 {
		t.Fatalf("the refused restart left history %v, %v", h, err)
	}
	before := identities(t, f.node)
	res, err := f.e.Restart(t.Context(), []string{nodestate.Scheduler, nodestate.Etcd})
	if err != nil || res.Outcome != Committed {
		t.Fatalf("restart: %+v %v", res, err)
	}
	want := []string{nodestate.Etcd, nodestate.Scheduler}
	if !slices.Equal(res.Changed, want) {
		t.Fatalf("restarted %v, want %v (roster order)", res.Changed, want)
	}
	txn := f.checkConverged(Committed, nil)
	if txn.Kind != journal.KindRestart || len(txn.EtcdBackup) != 0 {
		t.Fatalf("transaction kind %q, etcd backup %q: want a restart without a backup", txn.Kind, txn.EtcdBackup)
	}
	if string(txn.From) != string(txn.To) {
		t.Fatalf("a restart changed the node state:\n%s\n->\n%s", txn.From, txn.To)
	}
	replacedOnly(t, f.node.State, before, identities(t, f.node), want)
}

// TestRestartResumesAfterCrash: a restart crashed right after the
// scheduler's manifest was written is finished by Resume, which waits for
// the replacement the write caused; a second restart while it was open is
// refused.
func TestRestartResumesAfterCrash(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	before := identities(t, f.node)
	ctx := context.Background()
	e := f.engine(f.node.Scanner, testDeadlines)
	if !stopAt(e, fault.Step.Of(fault.AfterWrite, nodestate.Scheduler), func() { e.Restart(ctx, []string{nodestate.Scheduler}) }) {
		t.Fatal("the restart never reached after-write:kube-scheduler")
	}
	if _, err := f.e.Restart(ctx, []string{nodestate.Etcd}); !errors.Is(err, journal.ErrTxnOpen) {
		t.Fatalf("a second restart while one is open: %v, want journal.ErrTxnOpen", err)
	}
	res, err := f.engine(f.node.Scanner, testDeadlines).Resume(ctx)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("resume: %+v %v", res, err)
	}
	f.checkConverged(Committed, nil)
	replacedOnly(t, f.node.State, before, identities(t, f.node), []string{nodestate.Scheduler})
}
