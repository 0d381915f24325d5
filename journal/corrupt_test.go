package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// fillJournal creates a journal at path holding a node state and n closed
// transactions with a record each, each with the targets of a real
// upgrade (five manifests of 3 KiB): enough for branch pages from n = 60.
func fillJournal(t testing.TB, path string, n int) {
	t.Helper()
	j, err := Open(path, Options{BootID: func() (string, error) { return "boot-1", nil }})
	must(t, err)
	must(t, j.PutNodeState(testState(t, "v1.34.4")))
	rel := []byte("apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\n" + strings.Repeat("#", 300))
	var targets []Target
	for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-vip"} {
		targets = append(targets, Target{Component: c, Manifest: bytes.Repeat([]byte("spec: {}\n"), 300)})
	}
	for i := range n {
		txn, err := j.Begin(Txn{Kind: KindUpgrade, Release: rel, Targets: targets})
		must(t, err)
		must(t, j.Finish(txn.ID, PhaseRolledBack, fmt.Sprintf("test %d", i), nil, Record{Step: StepRestored}))
	}
	must(t, j.Close())
}

// testMeta is the meta bbolt uses in the file b.
func testMeta(t testing.TB, b []byte) boltMeta {
	t.Helper()
	m0 := decodeMeta(b)
	if m0.err != nil {
		t.Fatalf("meta 0: %v", m0.err)
	}
	m1 := decodeMeta(b[m0.pageSize:])
	if m1.err == nil && m1.txid > m0.txid {
		return m1
	}
	return m0
}

// pageWith returns the first page in use (not free: a free page may
// still hold an old branch or leaf) with flags.
func pageWith(t testing.TB, b []byte, flags uint16) int {
	t.Helper()
	m := testMeta(t, b)
	v := &verifier{f: bytes.NewReader(b), size: int64(len(b)), pageSize: int(m.pageSize)}
	if err := v.check(m); err != nil {
		t.Fatal(err)
	}
	for id := uint64(2); id < m.pgid; id++ {
		p := b[id*uint64(m.pageSize):]
		if v.used[id] && ne.Uint64(p) == id && ne.Uint16(p[8:]) == flags {
			return int(id)
		}
	}
	t.Fatalf("no page with flags %#x", flags)
	return 0
}

func garbage(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// TestOpenCorrupt: a damaged file is refused by Open, read-only or not,
// with an error wrapping ErrCorrupt that names the file, before bbolt
// reads it (no panic, no fault) and without writing to it.
func TestOpenCorrupt(t *testing.T) {
	healthyPath := filepath.Join(t.TempDir(), "healthy.db")
	fillJournal(t, healthyPath, 60)
	healthy := readFile(t, healthyPath)
	ps := int(testMeta(t, healthy).pageSize)
	cases := []struct {
		name   string
		damage func(b []byte) []byte
		want   string
	}{
		{"freelist page garbage", func(b []byte) []byte {
			off := int(testMeta(t, b).freelist) * ps
			garbage(b[off:off+ps], 1)
			return b
		}, "freelist"},
		{"freelist id in use", func(b []byte) []byte {
			m := testMeta(t, b)
			off := int(m.freelist) * ps
			ne.PutUint16(b[off+10:], 1)
			ne.PutUint64(b[off+pageHeaderSize:], m.root)
			return b
		}, "both free and in use"},
		{"branch page garbage", func(b []byte) []byte {
			off := pageWith(t, b, flagBranch) * ps
			garbage(b[off+pageHeaderSize:off+ps], 2)
			return b
		}, "page"},
		{"branch page cycle", func(b []byte) []byte {
			id := pageWith(t, b, flagBranch)
			ne.PutUint64(b[id*ps+pageHeaderSize+8:], uint64(id)) // element 0 points at its own page
			return b
		}, "referenced twice"},
		{"leaf page garbage", func(b []byte) []byte {
			off := pageWith(t, b, flagLeaf) * ps
			garbage(b[off+pageHeaderSize:off+ps], 3)
			return b
		}, "page"},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, "truncated"},
		{"one page", func(b []byte) []byte { return b[:ps] }, "shorter than its two meta pages"},
		{"wrong magic", func(b []byte) []byte {
			copy(b[pageHeaderSize:], "XXXX")
			copy(b[ps+pageHeaderSize:], "XXXX")
			return b
		}, "not a bbolt database"},
		{"zeroed meta pages", func(b []byte) []byte { clear(b[:2*ps]); return b }, "not a bbolt database"},
	}
	for _, tc := range cases {
		for _, ro := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s read-only=%v", tc.name, ro), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "stratum.db")
				damaged := tc.damage(bytes.Clone(healthy))
				must(t, os.WriteFile(path, damaged, 0o600))
				j, err := Open(path, Options{ReadOnly: ro})
				if err == nil {
					_ = j.Close()
					t.Fatal("Open succeeded")
				}
				var ce *CorruptError
				if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Path != path {
					t.Errorf("error is not a *CorruptError for %s: %v", path, err)
				}
				for _, w := range []string{path, tc.want, "nothing was written"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not say %q: %v", w, err)
					}
				}
				if !bytes.Equal(readFile(t, path), damaged) {
					t.Error("the damaged file was changed")
				}
				// The lock was released: the file can be replaced and opened.
				must(t, os.WriteFile(path, healthy, 0o600))
				openTest(t, path, Options{ReadOnly: ro})
			})
		}
	}
}

// TestOpenOneMetaDamaged: with one meta page damaged bbolt uses the other,
// as after a crash in the middle of writing a meta page: Open works.
func TestOpenOneMetaDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	fillJournal(t, path, 3)
	b := readFile(t, path)
	ps := int(testMeta(t, b).pageSize)
	clear(b[ps : 2*ps])
	must(t, os.WriteFile(path, b, 0o600))
	j := openTest(t, path, Options{})
	if h, err := j.History(0); err != nil || len(h) < 2 {
		t.Errorf("History() = %d txns, %v", len(h), err)
	}
}

// TestTxnPanicIsCorrupt: a panic inside a transaction is a *CorruptError,
// and the Journal refuses every later call; after one in a write, Close
// leaves the file alone rather than wait for bbolt's write lock.
func TestTxnPanicIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	fillJournal(t, path, 1)
	j, err := Open(path, Options{ReadOnly: true})
	must(t, err)
	err = j.view(func(*bolt.Tx) error { panic("page 9: damaged") })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "page 9: damaged") || !strings.Contains(err.Error(), path) {
		t.Errorf("view that panicked: %v", err)
	}
	if _, err := j.NodeState(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("NodeState after a panic: %v, want ErrCorrupt", err)
	}
	must(t, j.Close())

	j, err = Open(path, Options{})
	must(t, err)
	err = j.PutNodeState(testState(t, "v1.34.9"))
	must(t, err)
	after := readFile(t, path)
	err = j.update(func(tx *bolt.Tx, _ time.Time) error {
		if err := tx.Bucket(bucketState).Put(keyCurrent, []byte("x")); err != nil {
			return err
		}
		panic("damaged")
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("update that panicked: %v", err)
	}
	if err := j.PutNodeState(testState(t, "v1.34.4")); !errors.Is(err, ErrCorrupt) {
		t.Errorf("PutNodeState after a panic: %v, want ErrCorrupt", err)
	}
	if err := j.Close(); err == nil || !errors.Is(err, ErrCorrupt) {
		t.Errorf("Close after a panic in a write: %v", err)
	}
	if !bytes.Equal(readFile(t, path), after) {
		t.Error("the write that panicked changed the file")
	}
}

// BenchmarkVerifyFile is the cost of the check Open runs before bbolt
// opens the file, on a journal of 1000 transactions; BenchmarkOpenReadOnly
// is a whole read-only Open (check included) and Close of the same file.
func BenchmarkVerifyFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "stratum.db")
	fillJournal(b, path, 1000)
	fi, err := os.Stat(path)
	must(b, err)
	b.Logf("journal of 1000 transactions: %d bytes", fi.Size())
	f, err := os.Open(path)
	must(b, err)
	defer f.Close()
	for b.Loop() {
		must(b, verifyFile(f))
	}
}

func BenchmarkOpenReadOnly(b *testing.B) {
	path := filepath.Join(b.TempDir(), "stratum.db")
	fillJournal(b, path, 1000)
	for b.Loop() {
		j, err := Open(path, Options{ReadOnly: true})
		must(b, err)
		must(b, j.Close())
	}
}
