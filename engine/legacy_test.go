package engine

import (
	"bytes"
	"context"
	be "encoding/binary"
	"encoding/json"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// downgradeToV1 rewrites the journal at path as a schema-1 binary left it
// (journal/schema.go): no targets on the transactions, a done record's
// processes and an etcd-restored record's aside dir in "note", and
// meta/schema_version 1.
func downgradeToV1(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		err := rewriteJSON(tx.Bucket([]byte("txns")), func(m map[string]any) { delete(m, "targets") })
		if err != nil {
			return err
		}
		recs := tx.Bucket([]byte("records"))
		return recs.ForEachBucket(func(id []byte) error {
			return rewriteJSON(recs.Bucket(id), func(m map[string]any) {
				if ps, ok := m["processes"]; ok {
					note, _ := json.Marshal(ps)
					m["note"] = string(note)
					delete(m, "processes")
				}
				if aside, ok := m["asideDir"]; ok {
					m["note"] = aside
					delete(m, "asideDir")
				}
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	v := make([]byte, 8)
	be.BigEndian.PutUint64(v, 1)
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), v) }); err != nil {
		t.Fatal(err)
	}
}

// rewriteJSON applies fn to every JSON object value of bucket b (values are
// collected first: bbolt forbids a Put inside ForEach).
func rewriteJSON(b *bolt.Bucket, fn func(map[string]any)) error {
	type kv struct{ k, v []byte }
	var puts []kv
	if err := b.ForEach(func(k, v []byte) error {
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			return err
		}
		fn(m)
		nv, err := json.Marshal(m)
		puts = append(puts, kv{bytes.Clone(k), nv})
		return err
	}); err != nil {
		return err
	}
	for _, p := range puts {
		if err := b.Put(p.k, p.v); err != nil {
			return err
		}
	}
	return nil
}

// A transaction left open by a schema-1 binary (crashed after its first
// component's step) is resumed by this one: the journal migrates, the
// engine pins the targets a schema-1 binary would have written, and the
// upgrade commits with every manifest the render of the new state.
func TestResumeSchemaV1Txn(t *testing.T) {
	t.Parallel() // a test bed node of its own
	f := newFixture(t, testbed.Options{})
	rel := release(f.node.State, false, "", standin.ModeHealthy)
	ctx := context.Background()
	e := f.engine(f.node.Scanner, testDeadlines)
	if !stopAt(e, fault.AfterWrite.Of(nodestate.ControllerManager), func() { e.Run(ctx, rel, nil) }) {
		t.Fatal("the run never reached after-write:kube-controller-manager")
	}
	path := f.j.Path()
	if err := f.j.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeToV1(t, path)

	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatalf("open the schema-1 journal: %v", err)
	}
	t.Cleanup(func() { j.Close() })
	f.j = j
	if v, err := j.SchemaVersion(); err != nil || v != journal.CurrentSchemaVersion {
		t.Fatalf("schema version after open: %d, %v", v, err)
	}
	open, err := j.OpenTxn()
	if err != nil || open == nil || len(open.Targets) != 0 {
		t.Fatalf("open txn after migration: %+v, %v (want one without targets)", open, err)
	}
	recs, err := j.Records(open.ID)
	if err != nil {
		t.Fatal(err)
	}
	var done int
	for _, r := range recs {
		if r.Step == journal.StepDone {
			done++
			if len(r.Processes) == 0 {
				t.Errorf("migrated done record of %s has no processes", r.Component)
			}
		}
	}
	if done == 0 {
		t.Fatal("no done record survived the migration")
	}

	res, err := f.engine(f.node.Scanner, testDeadlines).Resume(ctx)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("resume of the schema-1 transaction: %+v, %v", res, err)
	}
	txn, err := j.Txn(open.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(txn.Targets) != len(txn.Changed) {
		t.Errorf("the resumed transaction pinned %d targets for %d changed components", len(txn.Targets), len(txn.Changed))
	}
	st, err := j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range manifest.NamesFor(st) {
		got, err := f.node.Store.Read(comp)
		if err != nil {
			t.Fatal(err)
		}
		pod, err := manifest.DecodePod(got)
		if err != nil {
			t.Fatal(err)
		}
		want, err := manifest.RenderBytes(st, prof, comp, manifest.RestartedAt(pod))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s after the resumed commit is not the render of the committed state", comp)
		}
	}
}
