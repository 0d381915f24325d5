package engine

// The remediation of the EtcdWALHistory hazard (issue 30 item 4): the
// transaction's first journaled step forces an etcd snapshot that covers
// the WAL entries the new etcd refuses, then etcd's own step goes on.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// v2Delete is a v2 write etcd 3.5 accepts and etcd 3.6 panics on.
var v2Delete = pb.Request{ID: 2, Method: "DELETE", Path: "/v2/keys/foo"}

// coverWAL takes a raft snapshot at the WAL's last entry, as an etcd
// with --snapshot-count=1 does, with etcd's own wal and snap packages.
func coverWAL(t *testing.T, dataDir string) {
	t.Helper()
	lg := zap.NewNop()
	w, err := wal.Open(lg, datadir.ToWALDir(dataDir), walpb.Snapshot{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, _, ents, err := w.ReadAll()
	if err != nil || len(ents) == 0 {
		t.Fatalf("WAL: %d entries, %v", len(ents), err)
	}
	last := ents[len(ents)-1].Index
	s := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: last, Term: 1, ConfState: raftpb.ConfState{Voters: []uint64{1}}}, Data: []byte("{}")}
	if err := snap.New(lg, datadir.ToSnapDir(dataDir)).SaveSnap(s); err != nil {
		t.Fatal(err)
	}
	if err := w.SaveSnapshot(walpb.Snapshot{Index: last, Term: 1, ConfState: &s.Metadata.ConfState}); err != nil {
		t.Fatal(err)
	}
}

// etcdSnapshots makes the model's etcd snapshot when the engine waits for
// it, and only if etcd's manifest on disk asks for --snapshot-count=1 (the
// model's etcd is no real etcd). forced counts the snapshots taken.
func (n *memNode) etcdSnapshots(forced *int) func(Event) {
	return func(ev Event) {
		if ev.Step != "wait-snapshot" {
			return
		}
		b, err := n.store.Read(nodestate.Etcd)
		if err != nil || !bytes.Contains(b, []byte("--snapshot-count=1\n")) {
			return
		}
		*forced++
		coverWAL(n.t, n.st.Etcd.DataDir)
	}
}

// snapshotStages is the Why of every etcd-snapshot record of txn id, and
// whether each came before etcd's own mark.
func (n *memNode) snapshotStages(id string) (stages []string, beforeMark bool) {
	n.t.Helper()
	recs, err := n.j.Records(id)
	if err != nil {
		n.t.Fatal(err)
	}
	beforeMark = true
	marked := false
	for _, r := range recs {
		switch {
		case r.Step == journal.StepMark && r.Component == nodestate.Etcd && r.Phase == journal.PhaseApplying:
			marked = true
		case r.Step == journal.StepEtcdSnapshot:
			stages = append(stages, r.Why)
			beforeMark = beforeMark && !marked
		}
	}
	return stages, beforeMark
}

// A 3.5 data dir with a v2 write after its last snapshot: the upgrade to
// 3.6 restarts etcd with --snapshot-count=1 first (journaled), and
// commits once the snapshot covers it. Before the remediation the run was
// refused by the pre-flight check.
func TestEtcdWALHazardForcesASnapshot(t *testing.T) {
	n := newMemNode(t)
	writeMemberWAL(t, n.st.Etcd.DataDir, v2Delete)
	forced := 0
	n.onEvent = n.etcdSnapshots(&forced)
	res, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v\nevents:\n%s", res, err, strings.Join(n.events, "\n"))
	}
	if forced != 1 {
		t.Errorf("etcd snapshots forced: %d, want 1", forced)
	}
	if got, before := n.snapshotStages(res.Txn); !slices.Equal(got, []string{journal.EtcdSnapshotForcing, journal.EtcdSnapshotCovered}) || !before {
		t.Errorf("etcd-snapshot records %v (before etcd's mark: %v), want forcing, covered before etcd's step", got, before)
	}
	if b, _ := n.store.Read(nodestate.Etcd); bytes.Contains(b, []byte("--snapshot-count=1\n")) {
		t.Error("etcd's committed manifest still forces snapshots")
	}
	scan, err := etcddata.ScanWAL(n.st.Etcd.DataDir)
	if err != nil || scan.DisallowedV2 != 0 {
		t.Errorf("WAL after the commit: %+v %v", scan, err)
	}
	n.expectConverged(Committed)
}

// No snapshot comes within the deadline: the transaction rolls back to
// the node as it was, etcd's data kept (only the same etcd ran on it).
func TestEtcdSnapshotNeverTakenRollsBack(t *testing.T) {
	n := newMemNode(t)
	writeMemberWAL(t, n.st.Etcd.DataDir, v2Delete)
	n.before = n.manifests()
	e := n.engine(nil)
	e.dl.EtcdSnapshot = 500 * time.Millisecond
	res, err := e.Run(t.Context(), release(n.st, true, "", ""), nil)
	if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
		t.Fatalf("Run: %+v %v, want rolled back", res, err)
	}
	if !strings.Contains(res.Reason, "snapshot") {
		t.Errorf("reason %q does not say which snapshot it waited for", res.Reason)
	}
	if d, ok := n.etcdDecision(res.Txn); !ok || d.EtcdData != journal.EtcdKeep {
		t.Errorf("etcd data decision %+v (%v), want keep", d, ok)
	}
	if b, _ := n.store.Read(nodestate.Etcd); bytes.Contains(b, []byte("--snapshot-count=1\n")) {
		t.Error("etcd's manifest after the rollback still forces snapshots")
	}
	n.expectConverged(RolledBack)
}

// EtcdWALHistory fails only for a WAL that cannot be read; ignoring it
// then lets the upgrade through without a forced snapshot, which could
// not tell when its snapshot covers the WAL.
func TestEtcdSnapshotSkippedWhenIgnored(t *testing.T) {
	n := newMemNode(t)
	writeMemberWAL(t, n.st.Etcd.DataDir, v2Delete)
	ws, _ := filepath.Glob(filepath.Join(datadir.ToWALDir(n.st.Etcd.DataDir), "*.wal"))
	if len(ws) == 0 {
		t.Fatal("no WAL file written")
	}
	if err := os.WriteFile(ws[0], []byte("not a WAL"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := n.engine(nil).Run(t.Context(), release(n.st, true, "", ""), nil); !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), CheckEtcdWALHistory) {
		t.Fatalf("Run: %v, want refused by %s", err, CheckEtcdWALHistory)
	}
	res, err := n.engine(nil).RunWith(t.Context(), release(n.st, true, "", ""), nil, UpgradeOptions{IgnorePreflight: []string{CheckEtcdWALHistory}})
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run ignoring %s: %+v %v", CheckEtcdWALHistory, res, err)
	}
	if got, _ := n.snapshotStages(res.Txn); len(got) != 0 {
		t.Errorf("etcd-snapshot records %v with the check ignored, want none", got)
	}
}

// A crash (and a power cut, with a reboot) at each new point converges on
// resume: the remediation is resumed from the journal and the WAL on disk.
func TestEtcdSnapshotCrashMatrix(t *testing.T) {
	for _, pt := range fault.EtcdSnapshotPoints() {
		for _, reboot := range []bool{false, true} {
			name := string(pt)
			if reboot {
				name += "/reboot"
			}
			t.Run(name, func(t *testing.T) {
				n := newMemNode(t)
				writeMemberWAL(t, n.st.Etcd.DataDir, v2Delete)
				forced := 0
				n.onEvent = n.etcdSnapshots(&forced)
				n.upgradeCrashedAt(pt)
				n.crash(reboot)
				n.resume(Committed)
				if forced != 1 {
					t.Errorf("etcd snapshots forced: %d, want 1", forced)
				}
				n.expectConverged(Committed)
			})
		}
	}
}
