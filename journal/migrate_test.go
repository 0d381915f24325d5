package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// writeV0 writes a pre-release (version 0) journal: bucket nodestate, key
// current, no meta. A nil state writes the bucket empty.
func writeV0(t testing.TB, path string, state []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucketV0NodeState)
		if err != nil || state == nil {
			return err
		}
		return b.Put(keyCurrent, state)
	}))
	must(t, db.Close())
}

func TestMigrationsTable(t *testing.T) {
	if len(migrations) != currentVersion {
		t.Fatalf("%d migrations for schema version %d: migrations[i] must take version i to i+1", len(migrations), currentVersion)
	}
	for i, m := range migrations {
		if m.name == "" || m.run == nil {
			t.Errorf("migration %d has no name or no function", i)
		}
	}
}

func TestMigrateV0(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	yaml, err := testState(t, "v1.34.4").Marshal()
	must(t, err)
	writeV0(t, path, yaml)

	created := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	j, err := Open(path, Options{Now: func() time.Time { return created }})
	must(t, err)
	if v, err := j.SchemaVersion(); err != nil || v != currentVersion {
		t.Errorf("SchemaVersion() after migration = %d, %v", v, err)
	}
	st, err := j.NodeState()
	must(t, err)
	if !reflect.DeepEqual(st, testState(t, "v1.34.4")) {
		t.Errorf("migrated node state = %+v", st)
	}
	// The migrated file is a working journal.
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(t, err)
	must(t, j.Commit(txn.ID, testState(t, "v1.34.5")))
	must(t, j.Close())

	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	must(t, err)
	defer db.Close()
	must(t, db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketV0NodeState) != nil {
			t.Error("the v0 bucket nodestate is still there")
		}
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			t.Fatal("no meta bucket")
		}
		if v := meta.Get(keySchemaVersion); len(v) != 8 || binary.BigEndian.Uint64(v) != currentVersion {
			t.Errorf("meta/schema_version = %x, want 8-byte big-endian %d", currentVersion, v)
		}
		if v := string(meta.Get(keyCreatedAt)); v != created.Format(time.RFC3339Nano) {
			t.Errorf("meta/created_at = %q", v)
		}
		for _, b := range [][]byte{bucketState, bucketTxns, bucketRecords, bucketOpen} {
			if tx.Bucket(b) == nil {
				t.Errorf("bucket %s missing", b)
			}
		}
		return nil
	}))
}

func TestMigrateV0Empty(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, path string){
		"empty v0 bucket": func(t *testing.T, path string) { writeV0(t, path, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stratum.db")
			setup(t, path)
			j := openTest(t, path, Options{})
			if v, err := j.SchemaVersion(); err != nil || v != currentVersion {
				t.Errorf("SchemaVersion() = %d, %v", v, err)
			}
			if _, err := j.NodeState(); !errors.Is(err, ErrNoState) {
				t.Errorf("NodeState() = %v, want ErrNoState", err)
			}
		})
	}
}

// TestMigrationFailureIsAtomic makes the last step of a migration fail and
// checks that none of its earlier writes were kept.
func TestMigrationFailureIsAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	yaml, err := testState(t, "v1.34.4").Marshal()
	must(t, err)
	writeV0(t, path, yaml)
	before := readFile(t, path)

	saved := migrations
	t.Cleanup(func() { migrations = saved })
	migrations = []migration{{name: "fails after writing", run: func(tx *bolt.Tx, now time.Time) error {
		if err := migrateV0toV1(tx, now); err != nil {
			return err
		}
		return errors.New("injected failure")
	}}}
	if _, err := Open(path, Options{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("injected failure")) {
		t.Fatalf("Open with a failing migration: %v", err)
	}
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("a failed migration changed the file")
	}
	migrations = saved
	j := openTest(t, path, Options{})
	if st, err := j.NodeState(); err != nil || st.KubernetesVersion != "v1.34.4" {
		t.Errorf("after a failed then a good migration: %v, %v", st, err)
	}
}

// A version-3 file (no txn has ignoredChecks) migrates to version 4 by
// moving the version alone: its transactions read back as they were, and
// a new transaction keeps the checks its operator ignored.
func TestMigrateV3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j := openTest(t, path, Options{})
	must(t, j.PutNodeState(testState(t, "v1.34.4")))
	old, err := j.Begin(Txn{Kind: KindUpgrade, Changed: []string{"etcd"}, Targets: []Target{{Component: "etcd", Manifest: []byte("m")}}})
	must(t, err)
	must(t, j.Close())
	setVersion(t, path, 3)

	j = openTest(t, path, Options{})
	if v, err := j.SchemaVersion(); err != nil || v != currentVersion {
		t.Fatalf("SchemaVersion() after migration = %d, %v; want %d", v, err, currentVersion)
	}
	got, err := j.Txn(old.ID)
	must(t, err)
	if !reflect.DeepEqual(*got, old) || got.IgnoredChecks != nil {
		t.Fatalf("txn after migration = %+v, want %+v", *got, old)
	}
	must(t, j.Finish(old.ID, PhaseRolledBack, "test", nil))
	ignored := []IgnoredCheck{{Check: "EtcdHealth", Component: "etcd", Message: "etcd does not answer"}}
	txn, err := j.Begin(Txn{Kind: KindUpgrade, IgnoredChecks: ignored})
	must(t, err)
	got, err = j.Txn(txn.ID)
	must(t, err)
	if !reflect.DeepEqual(got.IgnoredChecks, ignored) {
		t.Fatalf("ignoredChecks = %+v, want %+v", got.IgnoredChecks, ignored)
	}
}

// A version-4 file (no record has the etcd-data step) migrates to version
// 5 by moving the version alone: an open rollback's records read back as
// they were, and the decision journaled next reads back with its fields.
func TestMigrateV4(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j := openTest(t, path, Options{})
	must(t, j.PutNodeState(testState(t, "v1.34.4")))
	txn, err := j.Begin(Txn{Kind: KindUpgrade, Changed: []string{"etcd"}})
	must(t, err)
	old, err := j.Append(txn.ID, PhaseRollingBack, Record{Step: StepMark, Component: "etcd", Stamp: "s"})
	must(t, err)
	must(t, j.Close())
	setVersion(t, path, 4)

	j = openTest(t, path, Options{})
	if v, err := j.SchemaVersion(); err != nil || v != currentVersion {
		t.Fatalf("SchemaVersion() after migration = %d, %v; want %d", v, err, currentVersion)
	}
	_, err = j.Append(txn.ID, PhaseRollingBack, Record{Step: StepEtcdData, Component: "etcd", EtcdData: EtcdKeep, Why: "the old etcd ran"})
	must(t, err)
	recs, err := j.Records(txn.ID)
	must(t, err)
	if len(recs) != 2 || !reflect.DeepEqual(recs[0], old[0]) {
		t.Fatalf("records after migration = %+v, want %+v then the decision", recs, old)
	}
	if d := recs[1]; d.Step != StepEtcdData || d.EtcdData != EtcdKeep || d.Why != "the old etcd ran" {
		t.Fatalf("decision read back as %+v", d)
	}
}

// A version-6 file (no record has the etcd-answered or etcd-silent step)
// migrates to version 7 by moving the version alone: an open upgrade's
// records read back as they were, and the steps journaled next read back.
func TestMigrateV6(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j := openTest(t, path, Options{})
	must(t, j.PutNodeState(testState(t, "v1.34.4")))
	txn, err := j.Begin(Txn{Kind: KindUpgrade, Changed: []string{"etcd"}})
	must(t, err)
	old, err := j.Append(txn.ID, PhaseApplying, Record{Step: StepReplaced, Component: "etcd"})
	must(t, err)
	must(t, j.Close())
	setVersion(t, path, 6)

	j = openTest(t, path, Options{})
	if v, err := j.SchemaVersion(); err != nil || v != 7 {
		t.Fatalf("SchemaVersion() after migration = %d, %v; want 7", v, err)
	}
	_, err = j.Append(txn.ID, PhaseApplying, Record{Step: StepEtcdAnswered, Component: "etcd"}, Record{Step: StepEtcdSilent, Component: "etcd"})
	must(t, err)
	recs, err := j.Records(txn.ID)
	must(t, err)
	if len(recs) != 3 || !reflect.DeepEqual(recs[0], old[0]) || recs[1].Step != StepEtcdAnswered || recs[2].Step != StepEtcdSilent {
		t.Fatalf("records after migration = %+v, want %+v then the two new steps", recs, old)
	}
}
