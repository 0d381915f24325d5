package journal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// rawTxn is txns/<id> as stored.
func rawTxn(t *testing.T, path, id string) map[string]any {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	must(t, err)
	defer db.Close()
	var out map[string]any
	must(t, db.View(func(tx *bolt.Tx) error { return json.Unmarshal(tx.Bucket(bucketTxns).Get([]byte(id)), &out) }))
	return out
}

// copyJournal copies the journal file at path into a new directory and
// returns the copy's path.
func copyJournal(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	moved := filepath.Join(t.TempDir(), "restored", "stratum.db")
	must(t, os.MkdirAll(filepath.Dir(moved), 0o700))
	must(t, os.WriteFile(moved, b, 0o600))
	return moved
}

// TestPathsRelativeToStateDir: a txn's snapshot, source and etcd backup
// paths inside the journal's directory are stored relative to it and read
// back under wherever the journal is now; a path outside stays absolute.
func TestPathsRelativeToStateDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stratum.db")
	j := openTest(t, path, Options{})
	txn, err := j.Begin(Txn{Kind: KindUpgrade, Changed: []string{"etcd"}})
	must(t, err)
	snap := filepath.Join(dir, "snapshots", txn.ID)
	backup := `{"path":"` + snap + `.etcd.db","size":10}`
	must(t, j.Update(txn.ID, func(t *Txn) error {
		t.Phase, t.SnapshotDir, t.EtcdBackup = PhaseSnapshotted, snap, []byte(backup)
		return nil
	}))
	got, err := j.Txn(txn.ID)
	must(t, err)
	if got.SnapshotDir != snap || !strings.Contains(string(got.EtcdBackup), `"path":"`+snap+`.etcd.db"`) {
		t.Fatalf("read back: snapshotDir %q, etcdBackup %s", got.SnapshotDir, got.EtcdBackup)
	}
	must(t, j.Close())
	raw := rawTxn(t, path, txn.ID)
	if raw["snapshotDir"] != "snapshots/"+txn.ID {
		t.Errorf("stored snapshotDir %v, want snapshots/%s", raw["snapshotDir"], txn.ID)
	}

	moved := copyJournal(t, path)
	j = openTest(t, moved, Options{})
	defer j.Close()
	got, err = j.OpenTxn()
	must(t, err)
	newSnap := filepath.Join(filepath.Dir(moved), "snapshots", txn.ID)
	if got.SnapshotDir != newSnap || !strings.Contains(string(got.EtcdBackup), `"path":"`+newSnap+`.etcd.db"`) {
		t.Errorf("after the move: snapshotDir %q, etcdBackup %s; want under %s", got.SnapshotDir, got.EtcdBackup, filepath.Dir(moved))
	}
	hist, err := j.History(0)
	must(t, err)
	if len(hist) != 1 || hist[0].SnapshotDir != newSnap {
		t.Errorf("history after the move: %+v", hist)
	}
	must(t, j.Finish(txn.ID, PhaseRolledBack, "test", nil))
	// Outside the state directory: kept as it is (the engine refuses it).
	other, err := j.Begin(Txn{Kind: KindRollbackLast, Source: "/elsewhere/snapshots/x"})
	must(t, err)
	if other.Source != "/elsewhere/snapshots/x" {
		t.Errorf("a source outside the state directory read back as %q", other.Source)
	}
}

// TestMigrateV5Paths: a version-5 file holds absolute paths. Migrated in
// place, those inside its directory become relative; migrated after the
// state directory was copied elsewhere, the old directory's
// snapshots/<name> become this one's; any other path stays.
func TestMigrateV5Paths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stratum.db")
	j := openTest(t, path, Options{})
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(t, err)
	must(t, j.Close())
	// Write the txn as a version-5 binary did: absolute paths.
	db, err := bolt.Open(path, 0o600, nil)
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error {
		var st storedTxn
		if err := json.Unmarshal(tx.Bucket(bucketTxns).Get([]byte(txn.ID)), &st); err != nil {
			return err
		}
		st.SnapshotDir = filepath.Join(dir, "snapshots", txn.ID)
		st.EtcdBackup = []byte(`{"path":"` + filepath.Join(dir, "snapshots", txn.ID+".etcd.db") + `"}`)
		st.Source = "/srv/other/" + txn.ID
		b, err := json.Marshal(&st)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketTxns).Put([]byte(txn.ID), b)
	}))
	must(t, db.Close())
	setVersion(t, path, 5)
	moved := copyJournal(t, path)

	for _, p := range []string{path, moved} {
		j := openTest(t, p, Options{})
		got, err := j.Txn(txn.ID)
		must(t, err)
		must(t, j.Close())
		want := filepath.Join(filepath.Dir(p), "snapshots", txn.ID)
		if got.SnapshotDir != want || !strings.Contains(string(got.EtcdBackup), want+".etcd.db") || got.Source != "/srv/other/"+txn.ID {
			t.Errorf("%s migrated: snapshotDir %q, etcdBackup %s, source %q; want %s", p, got.SnapshotDir, got.EtcdBackup, got.Source, want)
		}
		if raw := rawTxn(t, p, txn.ID); raw["snapshotDir"] != "snapshots/"+txn.ID {
			t.Errorf("%s: stored snapshotDir %v after the migration", p, raw["snapshotDir"])
		}
	}
}
