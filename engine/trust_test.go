package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// hostileNode is planNode with short deadlines (nothing runs: a wait that is
// reached fails fast) and a victim directory beside the manifest and state
// directories, standing in for a directory the engine must never touch.
type hostileNode struct {
	t      *testing.T
	e      *Engine
	store  *manifest.Store
	j      *journal.Journal
	st     *nodestate.NodeState
	root   string
	snaps  string
	victim string
}

func newHostileNode(t *testing.T, keep int) *hostileNode {
	t.Helper()
	_, store, j, st := planNode(t, "default")
	root := filepath.Dir(store.Dir())
	n := &hostileNode{t: t, store: store, j: j, st: st, root: root, snaps: filepath.Join(root, "state", "snapshots"), victim: filepath.Join(root, "victim")}
	e, err := New(Config{Journal: j, Store: store, Snapshots: n.snaps, Keep: keep, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Deadlines: Deadlines{Replace: 50 * time.Millisecond, Active: 50 * time.Millisecond, Stop: 50 * time.Millisecond, Soak: 10 * time.Millisecond, EtcdBackup: 50 * time.Millisecond, Release: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	n.e = e
	if err := os.MkdirAll(filepath.Join(n.victim, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.victim, "sub", "precious"), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// tree is every entry under the node's root: type, mode and content (or
// link target).
func (n *hostileNode) tree() string {
	n.t.Helper()
	var lines []string
	err := filepath.WalkDir(n.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v", p, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:8])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// begin begins an upgrade transaction of the node's own state and applies
// fn to it, with recs, as a damaged or edited journal would hold it.
func (n *hostileNode) begin(kind string, fn func(*journal.Txn), recs ...journal.Record) journal.Txn {
	n.t.Helper()
	b := must(n.st.Marshal())
	txn, err := n.j.Begin(journal.Txn{Kind: kind, From: b, To: b, Changed: []string{nodestate.Scheduler},
		Targets: []journal.Target{{Component: nodestate.Scheduler, Manifest: must(n.store.Read(nodestate.Scheduler))}}})
	if err != nil {
		n.t.Fatal(err)
	}
	if err := n.j.Update(txn.ID, func(t *journal.Txn) error { fn(t); return nil }, recs...); err != nil {
		n.t.Fatal(err)
	}
	return *must(n.j.Txn(txn.ID))
}

// takeOther takes a snapshot for a second, closed transaction whose etcd
// manifest differs from the one on disk, and returns its id.
func (n *hostileNode) takeOther() string {
	n.t.Helper()
	b := must(n.st.Marshal())
	other, err := n.j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: b, To: b})
	if err != nil {
		n.t.Fatal(err)
	}
	orig := must(n.store.Read(nodestate.Etcd))
	if _, err := n.store.RestartAsIs(nodestate.Etcd, "2026-01-01T00:00:00Z"); err != nil {
		n.t.Fatal(err)
	}
	if _, err := snapshot.Take(filepath.Join(n.snaps, other.ID), n.store, manifest.DerivedPaths(n.st)); err != nil {
		n.t.Fatal(err)
	}
	if _, err := n.store.Put(nodestate.Etcd, orig); err != nil {
		n.t.Fatal(err)
	}
	if err := n.j.Finish(other.ID, journal.PhaseRolledBack, "test", nil); err != nil {
		n.t.Fatal(err)
	}
	return other.ID
}

func etcdBackupJSON(path string) []byte {
	b, _ := json.Marshal(etcddata.Backup{Path: path, SHA256: "00", Size: 1, Revision: 1, Members: 1})
	return b
}

// refused asserts that err is the untrusted-journal error naming field,
// and that the tree under the node's root is exactly before.
func (n *hostileNode) refused(err error, field, before string) {
	n.t.Helper()
	var ue *UntrustedJournalError
	if !errors.Is(err, ErrUntrustedJournal) || !errors.As(err, &ue) {
		n.t.Errorf("error %v, want one wrapping ErrUntrustedJournal", err)
	} else if ue.Field != field {
		n.t.Errorf("refused for %s (%v), want for %s", ue.Field, err, field)
	} else if !strings.Contains(err.Error(), "nothing was touched") {
		n.t.Errorf("error %q does not say that nothing was touched", err)
	}
	if after := n.tree(); after != before {
		n.t.Errorf("the tree changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// A journal whose transaction names a path outside where the engine puts
// it (/etc, a path through "..", a symlink, another transaction's snapshot,
// an etcd backup or aside dir elsewhere, a rollback --last source elsewhere)
// is refused by resume, rollback, rollback --last and retention before
// anything is created, moved or removed; the refusal is typed and the
// transaction stays as it was in the journal.
func TestHostileJournalIsRefusedWithNothingTouched(t *testing.T) {
	resume := func(n *hostileNode) error { _, err := n.e.Resume(t.Context()); return err }
	cases := []struct {
		name  string
		field string
		setup func(n *hostileNode)
		act   func(n *hostileNode) error
	}{
		{"snapshot dir /etc", "snapshotDir", func(n *hostileNode) {
			n.begin(journal.KindUpgrade, func(t *journal.Txn) { t.Phase, t.SnapshotDir = journal.PhaseRollingBack, "/etc" })
		}, resume},
		{"snapshot dir through ..", "snapshotDir", func(n *hostileNode) {
			n.begin(journal.KindUpgrade, func(t *journal.Txn) { t.SnapshotDir = n.snaps + "/../../victim/snap" })
		}, resume},
		{"snapshot dir stored relative, through ..", "snapshotDir", func(n *hostileNode) {
			// Journal schema 6 stores paths relative to its directory and
			// joins them back: a stored "../x" resolves outside it.
			n.begin(journal.KindUpgrade, func(t *journal.Txn) { t.Phase, t.SnapshotDir = journal.PhaseRollingBack, "../victim/snap" })
		}, resume},
		{"snapshot dir a symlink", "snapshotDir", func(n *hostileNode) {
			txn := n.begin(journal.KindUpgrade, func(*journal.Txn) {})
			if err := os.MkdirAll(n.snaps, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(n.victim, filepath.Join(n.snaps, txn.ID)); err != nil {
				t.Fatal(err)
			}
			if err := n.j.Update(txn.ID, func(t *journal.Txn) error { t.SnapshotDir = filepath.Join(n.snaps, txn.ID); return nil }); err != nil {
				t.Fatal(err)
			}
		}, resume},
		{"another transaction's snapshot", "snapshotDir", func(n *hostileNode) {
			other := n.takeOther()
			n.begin(journal.KindUpgrade, func(t *journal.Txn) { t.Phase, t.SnapshotDir = journal.PhaseRollingBack, filepath.Join(n.snaps, other) })
		}, resume},
		{"another transaction's snapshot, explicit rollback", "snapshotDir", func(n *hostileNode) {
			other := n.takeOther()
			n.begin(journal.KindUpgrade, func(t *journal.Txn) { t.Phase, t.SnapshotDir = journal.PhaseApplying, filepath.Join(n.snaps, other) })
		}, func(n *hostileNode) error { _, err := n.e.Rollback(t.Context(), "operator"); return err }},
		{"etcd backup in /etc", "etcdBackup.path", func(n *hostileNode) {
			n.begin(journal.KindUpgrade, func(t *journal.Txn) {
				t.Phase, t.EtcdBackup = journal.PhaseRollingBack, etcdBackupJSON("/etc/passwd")
			})
		}, resume},
		{"etcd backup of another transaction", "etcdBackup.path", func(n *hostileNode) {
			other := n.takeOther()
			n.begin(journal.KindUpgrade, func(t *journal.Txn) {
				t.Phase, t.EtcdBackup = journal.PhaseRollingBack, etcdBackupJSON(filepath.Join(n.snaps, other+".etcd.db"))
			})
		}, resume},
		{"aside dir elsewhere", "records.asideDir", func(n *hostileNode) {
			n.begin(journal.KindUpgrade, func(t *journal.Txn) { t.Phase = journal.PhaseRollingBack },
				journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepEtcdRestored, Component: nodestate.Etcd, AsideDir: n.victim})
		}, resume},
		{"derived target outside", "targets.derived.path", func(n *hostileNode) {
			n.begin(journal.KindUpgrade, func(t *journal.Txn) {
				t.Targets[0].Derived = []journal.File{{Path: filepath.Join(n.victim, "sub", "precious"), Data: []byte("pwned"), Mode: 0o600}}
				t.Targets[0].Component = nodestate.KubeAPIServer
				t.Changed = []string{nodestate.KubeAPIServer}
			})
		}, resume},
		{"rollback-last source /etc", "source", func(n *hostileNode) {
			n.begin(journal.KindRollbackLast, func(t *journal.Txn) { t.Source = "/etc" })
		}, resume},
		{"rollback --last of a commit whose snapshot is another's", "snapshotDir", func(n *hostileNode) {
			other := n.takeOther()
			txn := n.begin(journal.KindUpgrade, func(t *journal.Txn) { t.SnapshotDir = filepath.Join(n.snaps, other) })
			old := n.st.Clone()
			if err := n.j.Commit(txn.ID, old); err != nil {
				t.Fatal(err)
			}
		}, func(n *hostileNode) error { _, err := n.e.RollbackLast(t.Context()); return err }},
		{"retention protecting another's snapshot", "snapshotDir", func(n *hostileNode) {
			// The newest commit names a snapshot that is not its own (one
			// sorting after it): retention (keep 1) would protect that one
			// and remove the commit's own, which rollback --last needs.
			b := must(n.st.Marshal())
			mine, err := n.j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: b, To: b})
			if err != nil {
				t.Fatal(err)
			}
			last := "99991231T235959Z-ffff"
			for _, id := range []string{mine.ID, last} {
				if _, err := snapshot.Take(filepath.Join(n.snaps, id), n.store, manifest.DerivedPaths(n.st)); err != nil {
					t.Fatal(err)
				}
			}
			if err := n.j.Update(mine.ID, func(t *journal.Txn) error { t.SnapshotDir = filepath.Join(n.snaps, last); return nil }); err != nil {
				t.Fatal(err)
			}
			if err := n.j.Commit(mine.ID, n.st); err != nil {
				t.Fatal(err)
			}
		}, func(n *hostileNode) error { return n.e.pruneChecked() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newHostileNode(t, 1)
			c.setup(n)
			var openBefore *journal.Txn
			if o, err := n.j.OpenTxn(); err == nil && o != nil {
				openBefore = o
			}
			before := n.tree()
			err := c.act(n)
			n.refused(err, c.field, before)
			if openBefore != nil {
				after, err := n.j.Txn(openBefore.ID)
				if err != nil || after.Phase != openBefore.Phase {
					t.Errorf("the refused transaction moved from %s to %v (%v)", openBefore.Phase, after, err)
				}
			}
		})
	}
}

// Ids and paths are checked by one function: an id of any other format than
// the journal's, and paths that are almost right, are refused.
func TestTrustTxnRefusesEveryOddValue(t *testing.T) {
	n := newHostileNode(t, 5)
	b := must(n.st.Marshal())
	good := "20261202T130405Z-1a2b"
	base := func() *journal.Txn {
		return &journal.Txn{ID: good, Kind: journal.KindUpgrade, Phase: journal.PhaseRollingBack, From: b, To: b}
	}
	if err := n.e.trustTxn(base(), nil); err != nil {
		t.Fatalf("a well-formed transaction: %v", err)
	}
	ok := base()
	ok.SnapshotDir, ok.EtcdBackup = filepath.Join(n.snaps, good), etcdBackupJSON(filepath.Join(n.snaps, good+".etcd.db"))
	if err := n.e.trustTxn(ok, []journal.Record{{Step: journal.StepEtcdRestored, Component: nodestate.Etcd, AsideDir: n.st.Etcd.DataDir + ".stratum-pre-rollback-" + good}}); err != nil {
		t.Fatalf("a well-formed transaction with a snapshot, backup and aside dir: %v", err)
	}
	for _, d := range []string{journal.EtcdKeep, journal.EtcdRestore} {
		if err := n.e.trustTxn(ok, []journal.Record{{Step: journal.StepEtcdData, Component: nodestate.Etcd, EtcdData: d, Why: "w"}}); err != nil {
			t.Fatalf("an etcd-data record %s: %v", d, err)
		}
	}
	for _, r := range []journal.Record{
		{Step: journal.StepEtcdData, Component: nodestate.Etcd, EtcdData: "wipe"},
		{Step: journal.StepEtcdData, Component: nodestate.Etcd},
		{Step: journal.StepEtcdData, Component: nodestate.Scheduler, EtcdData: journal.EtcdRestore},
		{Step: journal.StepMark, Component: nodestate.Etcd, EtcdData: journal.EtcdRestore},
	} {
		var ue *UntrustedJournalError
		if err := n.e.trustTxn(ok, []journal.Record{r}); !errors.As(err, &ue) || ue.Field != "records.etcdData" {
			t.Errorf("record %+v: %v, want a refusal for records.etcdData", r, err)
		}
	}
	for name, c := range map[string]struct {
		field string
		fn    func(*journal.Txn)
	}{
		"id ../..":                    {"id", func(t *journal.Txn) { t.ID = "../.." }},
		"id with a slash":             {"id", func(t *journal.Txn) { t.ID = "20261202T130405Z-1a2b/x" }},
		"id empty":                    {"id", func(t *journal.Txn) { t.ID = "" }},
		"id upper hex":                {"id", func(t *journal.Txn) { t.ID = "20261202T130405Z-1A2B" }},
		"id not a time":               {"id", func(t *journal.Txn) { t.ID = "20261302T130405Z-1a2b" }},
		"snapshot dir trailing slash": {"snapshotDir", func(t *journal.Txn) { t.SnapshotDir = filepath.Join(n.snaps, good) + "/" }},
		"snapshot dir relative":       {"snapshotDir", func(t *journal.Txn) { t.SnapshotDir = good }},
		"etcd backup not json":        {"etcdBackup", func(t *journal.Txn) { t.EtcdBackup = []byte("{") }},
		"etcd backup path empty":      {"etcdBackup.path", func(t *journal.Txn) { t.EtcdBackup = etcdBackupJSON("") }},
		"source in an upgrade":        {"source", func(t *journal.Txn) { t.Source = filepath.Join(n.snaps, good) }},
		"unknown kind":                {"kind", func(t *journal.Txn) { t.Kind = "x" }},
		"unknown changed component":   {"changed", func(t *journal.Txn) { t.Changed = []string{"../etcd"} }},
	} {
		txn := base()
		c.fn(txn)
		err := n.e.trustTxn(txn, nil)
		var ue *UntrustedJournalError
		if !errors.As(err, &ue) || ue.Field != c.field {
			t.Errorf("%s: %v, want a refusal for %s", name, err, c.field)
		}
	}
}
