package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/journal"
)

// bbolt's on-disk layout, as far as the damage below needs it: a page
// starts with a 16-byte header (id u64, flags u16, count u16, overflow
// u32), pages 0 and 1 are the meta pages, whose meta (after the header) is
// magic u32, version u32, pageSize u32, flags u32, root bucket (root u64,
// sequence u64), freelist u64, pgid u64, txid u64, checksum u64, all in the
// machine's byte order (little-endian here).
const (
	pageHeader   = 16
	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagFreelist = 0x10
	metaFreelist = pageHeader + 32
	metaPgid     = pageHeader + 40
	metaTxid     = pageHeader + 48
	metaChecksum = pageHeader + 56
)

// boltFile is a bbolt file in memory, with its newest valid meta page.
type boltFile struct {
	b        []byte
	pageSize int
	meta     int // offset of the meta in use
}

func parseBolt(t *testing.T, b []byte) *boltFile {
	t.Helper()
	f := &boltFile{b: b, pageSize: int(binary.LittleEndian.Uint32(b[pageHeader+8:]))}
	best := -1
	for _, off := range []int{pageHeader, f.pageSize + pageHeader} {
		h := fnv.New64a()
		h.Write(b[off : off+metaChecksum-pageHeader])
		if h.Sum64() != binary.LittleEndian.Uint64(b[off+metaChecksum-pageHeader:]) {
			continue
		}
		if best < 0 || f.u64(off+metaTxid-pageHeader) > f.u64(best+metaTxid-pageHeader) {
			best = off
		}
	}
	if best < 0 {
		t.Fatal("no valid meta page")
	}
	f.meta = best
	return f
}

func (f *boltFile) u64(off int) uint64 { return binary.LittleEndian.Uint64(f.b[off:]) }
func (f *boltFile) freelist() int      { return int(f.u64(f.meta + metaFreelist - pageHeader)) }
func (f *boltFile) pgid() int          { return int(f.u64(f.meta + metaPgid - pageHeader)) }

// page returns the first page below the high water mark with flags that
// is neither the freelist nor free (a free page may still hold an old
// branch or leaf), or fails the test.
func (f *boltFile) page(t *testing.T, flags uint16) int {
	t.Helper()
	free := map[int]bool{}
	fl := f.freelist() * f.pageSize
	count, ids := int(binary.LittleEndian.Uint16(f.b[fl+10:])), fl+pageHeader
	if count == 0xFFFF {
		count, ids = int(f.u64(ids)), ids+8
	}
	for i := range count {
		free[int(f.u64(ids+8*i))] = true
	}
	for id := 2; id < f.pgid(); id++ {
		off := id * f.pageSize
		if binary.LittleEndian.Uint16(f.b[off+8:]) == flags && id != f.freelist() && !free[id] && int(f.u64(off)) == id {
			return id
		}
	}
	t.Fatalf("no page with flags %#x", flags)
	return 0
}

// garble overwrites b[from:to] with bytes from a fixed seed.
func garble(b []byte, from, to int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := from; i < to; i++ {
		b[i] = byte(r.Uint32())
	}
}

// damages are the ways a journal is damaged in TestCorruptJournal: each
// returns the damaged copy of a healthy journal b.
var damages = []struct {
	name string
	fn   func(t *testing.T, b []byte) []byte
}{
	{"freelist page garbage", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		off := f.freelist() * f.pageSize
		garble(b, off, off+f.pageSize, 1)
		return b
	}},
	{"freelist ids garbage", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		off := f.freelist() * f.pageSize
		binary.LittleEndian.PutUint16(b[off+10:], 40) // 40 free ids ...
		garble(b, off+pageHeader, off+pageHeader+40*8, 2)
		return b
	}},
	{"branch page garbage", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		off := f.page(t, flagBranch) * f.pageSize
		garble(b, off+pageHeader, off+f.pageSize, 3)
		return b
	}},
	{"leaf page garbage", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		off := f.page(t, flagLeaf) * f.pageSize
		garble(b, off+pageHeader, off+f.pageSize, 4)
		return b
	}},
	{"every page garbage", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		garble(b, 2*f.pageSize, len(b), 5)
		return b
	}},
	{"truncated to half", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		return b[:f.pgid()/2*f.pageSize]
	}},
	{"truncated to the meta pages", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		return b[:2*f.pageSize]
	}},
	{"truncated to one page", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		return b[:f.pageSize]
	}},
	{"wrong magic", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		copy(b[pageHeader:], "XXXX")
		copy(b[f.pageSize+pageHeader:], "XXXX")
		return b
	}},
	{"zeroed meta pages", func(t *testing.T, b []byte) []byte {
		f := parseBolt(t, b)
		clear(b[:2*f.pageSize])
		return b
	}},
}

// corruptFixture is a node (manifests rendered by init) whose journal holds
// enough transactions for branch pages, and release and state files.
type corruptFixture struct {
	root, manifests, state, journal, release, stateFile string
	healthy                                             []byte
}

func newCorruptFixture(t *testing.T) *corruptFixture {
	t.Helper()
	root := t.TempDir()
	fx := &corruptFixture{
		root:      root,
		manifests: filepath.Join(root, "manifests"),
		state:     filepath.Join(root, "state"),
		release:   filepath.Join(root, "release.yaml"),
		stateFile: "../../testdata/states/default.yaml",
	}
	fx.journal = filepath.Join(fx.state, cli.JournalFile)
	rel := "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.4\nimages:\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.5\n"
	if err := os.WriteFile(fx.release, []byte(rel), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := fx.su(t, "init", "--state="+fx.stateFile); code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, out, errOut)
	}
	j, err := journal.Open(fx.journal, journal.Options{BootID: func() (string, error) { return "boot-1", nil }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		txn, err := j.Begin(journal.Txn{Kind: journal.KindUpgrade, Release: []byte(rel + strings.Repeat("#", 300))})
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Finish(txn.ID, journal.PhaseRolledBack, fmt.Sprintf("test %d", i), nil, journal.Record{Step: journal.StepRestored}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	fx.healthy, err = os.ReadFile(fx.journal)
	if err != nil {
		t.Fatal(err)
	}
	return fx
}

// su runs the stratum-upgrade binary on the fixture's node.
func (fx *corruptFixture) su(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	argv := append([]string{"--manifest-dir=" + fx.manifests, "--state-dir=" + fx.state, "--proc-scope=self", "--lock-timeout=100ms"}, args...)
	cmd := exec.Command("stratum-upgrade", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("stratum-upgrade %v: %v", args, err)
	return 0, "", ""
}

// snapshotDir returns every file under dir with its bytes.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCorruptJournal is defect 4: every command that opens a damaged
// journal (garbage in its pages, truncated, wrong magic, zeroed meta pages,
// a newer schema) fails with exit 1 and a message that names the file and
// says what to do (audit, which works without a journal, warns and goes
// on); it never panics, and it writes nothing: not the journal, not a
// manifest.
func TestCorruptJournal(t *testing.T) {
	fx := newCorruptFixture(t)
	cmds := [][]string{
		{"status"}, {"history"}, {"audit"}, {"plan", "--to=" + fx.release}, {"render"},
		{"run", "--to=" + fx.release}, {"resume"}, {"resume", "--prepare"},
		{"rollback"}, {"rollback", "--last"}, {"init", "--state=" + fx.stateFile}, {"init", "--force", "--state=" + fx.stateFile},
	}
	kinds := append(damages[:len(damages):len(damages)], struct {
		name string
		fn   func(t *testing.T, b []byte) []byte
	}{"newer schema", func(t *testing.T, b []byte) []byte {
		p := filepath.Join(t.TempDir(), "j.db")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := bolt.Open(p, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 99))
		})
		if err := errors.Join(err, db.Close()); err != nil {
			t.Fatal(err)
		}
		out, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}})
	manifests := snapshotDir(t, fx.manifests)
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			damaged := k.fn(t, bytes.Clone(fx.healthy))
			for _, args := range cmds {
				if err := os.WriteFile(fx.journal, damaged, 0o600); err != nil {
					t.Fatal(err)
				}
				code, out, errOut := fx.su(t, args...)
				what := strings.Join(args, " ")
				wantCode := cli.ExitError
				if args[0] == "audit" {
					// audit reads the manifests; without a readable
					// journal it warns and audits every manifest present.
					wantCode = cli.ExitOK
				}
				if code != wantCode {
					t.Errorf("%s: exit %d, want %d\n%s%s", what, code, wantCode, out, errOut)
				}
				for _, bad := range []string{"panic", "goroutine"} {
					if strings.Contains(errOut, bad) || strings.Contains(out, bad) {
						t.Errorf("%s: the output says %q:\n%s%s", what, bad, out, errOut)
					}
				}
				want := []string{fx.journal, "nothing was written"}
				if args[0] == "audit" {
					want = []string{"journal not readable", fx.journal}
				} else if k.name == "newer schema" {
					want = append(want, "newer stratum-upgrade")
				} else {
					want = append(want, "docs/operations.md")
				}
				for _, w := range want {
					if !strings.Contains(errOut, w) {
						t.Errorf("%s: stderr does not say %q:\n%s", what, w, errOut)
					}
				}
				if after, err := os.ReadFile(fx.journal); err != nil || !bytes.Equal(after, damaged) {
					t.Errorf("%s: the damaged journal was changed (%v)", what, err)
				}
				if after := snapshotDir(t, fx.manifests); fmt.Sprint(after) != fmt.Sprint(manifests) {
					t.Errorf("%s: the manifests were changed", what)
				}
			}
		})
	}

	// The recovery docs/operations.md gives: move the journal aside and
	// import the node state again.
	if err := os.Rename(fx.journal, filepath.Join(fx.root, "stratum.db.damaged")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "--state=" + fx.stateFile}, {"status"}} {
		if code, out, errOut := fx.su(t, args...); code != cli.ExitOK {
			t.Errorf("after moving the journal aside, %s: exit %d\n%s%s", args[0], code, out, errOut)
		}
	}
}
