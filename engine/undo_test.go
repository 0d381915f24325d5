package engine

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
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

// rollback --last after an upgrade and a restart undoes the upgrade: a
// restart changes nothing to undo, so it is passed over. Before the fix
// it answered "nothing to do ... run --to RELEASE", and run refused that
// release as a downgrade naming rollback --last: a circle the real
// cluster found (issue 38).
func TestRollbackLastPassesOverARestart(t *testing.T) {
	n := newMemNode(t)
	before := n.st.Clone()
	up, err := n.engine(nil).Run(t.Context(), release(n.st, false, "", ""), nil)
	if err != nil || up.Outcome != Committed {
		t.Fatalf("upgrade: %+v %v", up, err)
	}
	if res, err := n.engine(nil).Restart(t.Context(), []string{nodestate.KubeAPIServer}); err != nil || res.Outcome != Committed {
		t.Fatalf("restart: %+v %v", res, err)
	}
	plan, what, err := PlanRollbackLast(n.j, n.store, 1)
	if err != nil {
		t.Fatalf("rollback --last --dry-run: %v", err)
	}
	if !strings.Contains(what, up.Txn) || len(plan.Changed()) == 0 {
		t.Errorf("dry run: %q changing %v, want the undo of %s", what, plan.Changed(), up.Txn)
	}
	res, err := n.engine(nil).RollbackLast(t.Context())
	if err != nil || res.Outcome != Committed {
		t.Fatalf("rollback --last: %+v %v, want the upgrade %s undone", res, err, up.Txn)
	}
	st, err := n.j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Images[nodestate.KubeAPIServer], before.Images[nodestate.KubeAPIServer]; got != want {
		t.Errorf("after rollback --last kube-apiserver's image is %s, want %s (before the upgrade)", got, want)
	}
	// And once undone, the next rollback --last finds the rollback, which
	// it refuses as before.
	if _, err := n.engine(nil).RollbackLast(t.Context()); !errors.Is(err, ErrCannotUndo) {
		t.Errorf("second rollback --last: %v, want ErrCannotUndo", err)
	}
}
