package engine

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/ciq/stratum-upgrade/journal"
)

// An open rollback-last that an older binary began for a committed stop
// (its source the stop's snapshot, which that binary then refused as
// untrusted, so resume and rollback refused it too and the node was
// wedged) is trusted now and rolled back rather than driven: nothing of
// it was written. Before the fix resume refused it with
// ErrUntrustedJournal.
func TestWedgedRollbackLastIsRolledBack(t *testing.T) {
	n := newHostileNode(t, 5)
	b := must(n.st.Marshal())
	stop, err := n.j.Begin(journal.Txn{Kind: journal.KindStop, From: b, To: b})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.j.Commit(stop.ID, n.st); err != nil {
		t.Fatal(err)
	}
	// A single member: resume coordinates with no cluster.
	single := n.st.Clone()
	single.Etcd.InitialCluster = "cp-1=https://10.0.0.11:2380"
	sb := must(single.Marshal())
	wedged := n.begin(journal.KindRollbackLast, func(t *journal.Txn) {
		t.Source, t.From, t.To = filepath.Join(n.snaps, stop.ID), sb, sb
	})

	res, err := n.e.Resume(t.Context())
	if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack || res.Txn != wedged.ID {
		t.Fatalf("resume of the wedged rollback-last: %+v, %v; want it rolled back", res, err)
	}
	if open := must(n.j.OpenTxn()); open != nil {
		t.Errorf("a transaction is still open: %+v", open)
	}
	got := must(n.j.Txn(wedged.ID))
	if got.Phase != journal.PhaseRolledBack || got.SnapshotDir != "" {
		t.Errorf("the wedged rollback-last ended %s with snapshot %q, want rolled-back with none", got.Phase, got.SnapshotDir)
	}
}
