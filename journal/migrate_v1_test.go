package journal

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ciq/stratum-upgrade/proc"
)

// writeV1 writes a version-1 journal holding an open upgrade transaction in
// phase rolling-back: its records are exactly as a schema-1 binary wrote
// them, the payload of done and etcd-restored records in "note". extra is
// one more raw v1 record, if not nil.
func writeV1(t *testing.T, path string, extra map[string]any) string {
	t.Helper()
	j := openTest(t, path, Options{})
	from, _ := testState(t, "v1.34.4").Marshal()
	to, _ := testState(t, "v1.34.5").Marshal()
	txn, err := j.Begin(Txn{Kind: KindUpgrade, From: from, To: to, Changed: []string{"etcd", "kube-apiserver"}})
	must(t, err)
	must(t, j.Close())

	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	v1 := []map[string]any{
		{"seq": 1, "time": "2026-12-02T13:04:05Z", "bootID": "boot-A", "phase": "applying", "step": "mark", "component": "etcd", "procMark": map[string]any{"ticks": 7, "bootID": "boot-A"}},
		{"seq": 2, "time": "2026-12-02T13:04:06Z", "bootID": "boot-A", "phase": "applying", "step": "done", "component": "etcd", "note": `[{"pid":41,"startTicks":9}]`},
		{"seq": 3, "time": "2026-12-02T13:04:07Z", "bootID": "boot-A", "phase": "rolling-back", "step": "etcd-restored", "component": "etcd", "note": "/var/lib/etcd.stratum-pre-rollback-x"},
	}
	if extra != nil {
		v1 = append(v1, extra)
	}
	must(t, db.Update(func(tx *bolt.Tx) error {
		recs := tx.Bucket(bucketRecords).Bucket([]byte(txn.ID))
		for i, r := range v1 {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := recs.Put(u64(uint64(i+1)), b); err != nil {
				return err
			}
		}
		if err := recs.SetSequence(uint64(len(v1))); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(1))
	}))
	must(t, db.Close())
	return txn.ID
}

func TestMigrateV1OpenTxn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	id := writeV1(t, path, nil)
	j := openTest(t, path, Options{})
	if v, err := j.SchemaVersion(); err != nil || v != currentVersion {
		t.Fatalf("SchemaVersion() = %d, %v", v, err)
	}
	open, err := j.OpenTxn()
	must(t, err)
	if open == nil || open.ID != id || len(open.Targets) != 0 {
		t.Fatalf("open txn after migration = %+v, want %s with no targets", open, id)
	}
	recs, err := j.Records(id)
	must(t, err)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(recs), recs)
	}
	if recs[0].Step != StepMark || recs[0].ProcMark == nil || recs[0].ProcMark.Ticks != 7 {
		t.Errorf("mark record = %+v", recs[0])
	}
	if want := []proc.Process{{PID: 41, StartTicks: 9}}; recs[1].Step != StepDone || !reflect.DeepEqual(recs[1].Processes, want) {
		t.Errorf("done record = %+v, want processes %v", recs[1], want)
	}
	if recs[2].Step != StepEtcdRestored || recs[2].AsideDir != "/var/lib/etcd.stratum-pre-rollback-x" {
		t.Errorf("etcd-restored record = %+v", recs[2])
	}
	// The migrated transaction takes new records.
	if _, err := j.Append(id, PhaseRollingBack, Record{Step: StepRestored}); err != nil {
		t.Errorf("Append after migration: %v", err)
	}
}

// A v1 record this binary cannot read fails the migration, which writes
// nothing: the file keeps version 1, byte for byte.
func TestMigrateV1Refuses(t *testing.T) {
	for name, extra := range map[string]map[string]any{
		"unknown step":       {"seq": 4, "phase": "applying", "step": "sideways"},
		"done note not json": {"seq": 4, "phase": "applying", "step": "done", "component": "etcd", "note": "[{"},
		"note on a mark":     {"seq": 4, "phase": "applying", "step": "mark", "note": "what"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stratum.db")
			writeV1(t, path, extra)
			before, err := os.ReadFile(path)
			must(t, err)
			j, err := Open(path, Options{})
			if err == nil {
				j.Close()
				t.Fatal("Open migrated a journal with a record it cannot read")
			}
			if !strings.Contains(err.Error(), "v1 to v2") {
				t.Errorf("error does not name the migration: %v", err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Error("the failed migration changed the file")
			}
		})
	}
}

func TestAppendRefusesUnknownStep(t *testing.T) {
	j := openTest(t, filepath.Join(t.TempDir(), "stratum.db"), Options{})
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(t, err)
	if _, err := j.Append(txn.ID, PhaseApplying, Record{Step: "sideways"}); err == nil || !strings.Contains(err.Error(), "unknown step") {
		t.Errorf("Append of an unknown step: %v", err)
	}
}
