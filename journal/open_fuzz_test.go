package journal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// FuzzOpen: whatever bytes are at the journal's path, Open (read-only,
// then read-write) never panics or faults: it fails with an error, or it
// works and every read method works or fails with an error. Seeds:
// testdata/fuzz/FuzzOpen (journals of schema versions 0 and 2, one newer,
// damaged ones) and the small journals of smallJournals.
func FuzzOpen(f *testing.F) {
	for _, b := range smallJournals(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "stratum.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{true, false} {
			j, err := Open(path, Options{ReadOnly: ro, BootID: func() (string, error) { return "boot", nil }})
			if err != nil {
				if errors.Is(err, ErrLocked) {
					t.Fatalf("read-only=%v: %v", ro, err)
				}
				continue
			}
			readAll(j)
			if err := j.Close(); err != nil {
				t.Fatalf("read-only=%v: close: %v", ro, err)
			}
		}
	})
}

// smallJournals are journals with 1 KiB pages cut to their high water
// mark, small enough for the fuzzer to mutate quickly: an empty one, one
// with a node state and an open transaction with a record.
func smallJournals(t testing.TB) map[string][]byte {
	t.Helper()
	dir := t.TempDir()
	out := map[string][]byte{}
	for _, name := range []string{"empty", "open-txn"} {
		p := filepath.Join(dir, name+".db")
		db, err := bolt.Open(p, 0o600, &bolt.Options{PageSize: 1024})
		must(t, err)
		must(t, db.Close())
		j, err := Open(p, Options{BootID: func() (string, error) { return "b", nil }})
		must(t, err)
		if name == "open-txn" {
			must(t, j.PutNodeState(testState(t, "v1.34.4")))
			txn, err := j.Begin(Txn{Kind: KindUpgrade})
			must(t, err)
			_, err = j.Append(txn.ID, PhaseApplying, Record{Step: StepMark, Component: "etcd"})
			must(t, err)
		}
		must(t, j.Close())
		b := readFile(t, p)
		m := testMeta(t, b)
		out[name] = b[:m.pgid*uint64(m.pageSize)]
	}
	return out
}

// readAll calls every read method on everything the journal names.
func readAll(j *Journal) {
	_, _ = j.SchemaVersion()
	_, _ = j.NodeState()
	_, _ = j.OpenTxn()
	hist, _ := j.History(0)
	for _, txn := range hist {
		_, _ = j.Txn(txn.ID)
		_, _ = j.Records(txn.ID)
	}
}
