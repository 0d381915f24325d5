package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

const stateV1344 = `apiVersion: stratum.ciq.com/v1
kind: NodeState
nodeName: cp-1
advertiseAddress: 10.0.0.11
kubernetesVersion: v1.34.4
images:
  etcd: registry.k8s.io/etcd:3.5.35-0
  kube-apiserver: registry.k8s.io/kube-apiserver:v1.34.4
  kube-controller-manager: registry.k8s.io/kube-controller-manager:v1.34.4
  kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.4
`

func testState(t testing.TB, version string) *nodestate.NodeState {
	t.Helper()
	st, err := nodestate.Parse([]byte(strings.ReplaceAll(stateV1344, "v1.34.4", version)))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// clock is a deterministic Options.Now that advances a second per call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// bootIDs is an Options.BootID whose answer the test can change.
type bootIDs struct {
	mu sync.Mutex
	id string
}

func (b *bootIDs) set(id string) { b.mu.Lock(); b.id = id; b.mu.Unlock() }
func (b *bootIDs) BootID() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id, nil
}

func openTest(t testing.TB, path string, opt Options) *Journal {
	t.Helper()
	j, err := Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpenCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "var", "lib", "stratum", "stratum.db")
	j := openTest(t, path, Options{})
	if j.Path() != path {
		t.Errorf("Path() = %q, want %q", j.Path(), path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Errorf("journal mode = %v, want -rw-------", fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("parent mode = %v, want drwx------", di.Mode())
	}
	if v, err := j.SchemaVersion(); err != nil || v != currentVersion {
		t.Errorf("SchemaVersion() = %d, %v; want %d", v, err, currentVersion)
	}
	if _, err := j.NodeState(); !errors.Is(err, ErrNoState) {
		t.Errorf("NodeState() of a new journal: %v, want ErrNoState", err)
	}
	if txn, err := j.OpenTxn(); txn != nil || err != nil {
		t.Errorf("OpenTxn() of a new journal = %v, %v", txn, err)
	}
	if h, err := j.History(0); len(h) != 0 || err != nil {
		t.Errorf("History() of a new journal = %v, %v", h, err)
	}
}

func TestOpenTightensMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j := openTest(t, path, Options{})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	openTest(t, path, Options{})
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after Open = %v (%v), want 0600", fi.Mode(), err)
	}
}

func TestOpenRefuses(t *testing.T) {
	garbage := bytes.Repeat([]byte("this is not a bbolt database\n"), 600)
	cases := []struct {
		name  string
		setup func(t *testing.T, path string)
		opt   Options
		want  []string
		is    error
	}{
		{
			name: "symlink",
			setup: func(t *testing.T, path string) {
				real := filepath.Join(filepath.Dir(path), "real.db")
				j := openTest(t, real, Options{})
				_ = j.Close()
				if err := os.Symlink(real, path); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"symbolic link"},
			is:   durable.ErrSymlink,
		},
		{
			name: "dangling symlink",
			setup: func(t *testing.T, path string) {
				if err := os.Symlink(filepath.Join(filepath.Dir(path), "nowhere.db"), path); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"symbolic link"},
			is:   durable.ErrSymlink,
		},
		{
			name:  "directory",
			setup: func(t *testing.T, path string) { must(t, os.Mkdir(path, 0o700)) },
			want:  []string{"not a regular file"},
			is:    durable.ErrNotRegular,
		},
		{
			name:  "garbage",
			setup: func(t *testing.T, path string) { must(t, os.WriteFile(path, garbage, 0o600)) },
			want:  []string{"not a bbolt database", "nothing was written"},
		},
		{
			name:  "short garbage",
			setup: func(t *testing.T, path string) { must(t, os.WriteFile(path, []byte("hello\n"), 0o600)) },
			want:  []string{"not a bbolt database"},
		},
		{
			name:  "garbage read-only",
			setup: func(t *testing.T, path string) { must(t, os.WriteFile(path, garbage, 0o600)) },
			opt:   Options{ReadOnly: true},
			want:  []string{"not a bbolt database"},
		},
		{
			name:  "newer schema",
			setup: func(t *testing.T, path string) { makeJournal(t, path); setVersion(t, path, 99) },
			want:  []string{"schema version 99", fmt.Sprintf("version %d that this stratum-upgrade knows", currentVersion), "nothing was written"},
		},
		{
			name:  "newer schema read-only",
			setup: func(t *testing.T, path string) { makeJournal(t, path); setVersion(t, path, currentVersion+1) },
			opt:   Options{ReadOnly: true},
			want:  []string{fmt.Sprintf("schema version %d", currentVersion+1), fmt.Sprintf("version %d", currentVersion)},
		},
		{
			name:  "empty read-only",
			setup: func(t *testing.T, path string) { must(t, os.WriteFile(path, nil, 0o600)) },
			opt:   Options{ReadOnly: true},
			want:  []string{"is empty: 0 bytes", "no journal was ever written"},
			is:    ErrEmpty,
		},
		{
			// Defect H (issue 37): a read-write Open made a lost journal
			// a new, empty one, and the node forgot it had any.
			name:  "empty",
			setup: func(t *testing.T, path string) { must(t, os.WriteFile(path, nil, 0o600)) },
			want:  []string{"is empty: 0 bytes", "no journal was ever written", "nothing was written"},
			is:    ErrEmpty,
		},
		{
			name:  "missing read-only",
			setup: func(t *testing.T, path string) {},
			opt:   Options{ReadOnly: true},
			want:  []string{"does not exist"},
		},
		{
			name: "v0 needs migration read-only",
			setup: func(t *testing.T, path string) {
				writeV0(t, path, nil)
			},
			opt:  Options{ReadOnly: true},
			want: []string{"schema version 0", "needs migrating", "read-only"},
			is:   ErrNeedsMigration,
		},
		{
			name: "foreign bbolt database",
			setup: func(t *testing.T, path string) {
				db, err := bolt.Open(path, 0o600, nil)
				must(t, err)
				must(t, db.Update(func(tx *bolt.Tx) error {
					_, err := tx.CreateBucket([]byte("members"))
					return err
				}))
				must(t, db.Close())
			},
			want: []string{"not a stratum-upgrade journal", `"members"`, "unchanged"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stratum.db")
			tc.setup(t, path)
			before, _ := os.ReadFile(path) // nil for a directory or missing file
			j, err := Open(path, tc.opt)
			if err == nil {
				_ = j.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if !strings.Contains(msg, path) {
				t.Errorf("error does not name the file %s: %v", path, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error is not %v: %v", tc.is, err)
			}
			if ee := (*EmptyError)(nil); tc.is == ErrEmpty && (!errors.As(err, &ee) || ee.Path != path) {
				t.Errorf("error is not an *EmptyError naming %s: %#v", path, err)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Errorf("the refused file was changed")
			}
			if tc.name == "missing read-only" {
				if _, err := os.Lstat(path); !os.IsNotExist(err) {
					t.Errorf("read-only Open created %s", path)
				}
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// makeJournal creates a current-version journal at path and closes it.
func makeJournal(t testing.TB, path string) {
	t.Helper()
	j, err := Open(path, Options{})
	must(t, err)
	must(t, j.Close())
}

// setVersion overwrites meta/schema_version with raw bbolt.
func setVersion(t testing.TB, path string, v uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	must(t, db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchemaVersion, u64(v)) }))
	must(t, db.Close())
}

func TestLifecycle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	clk := &clock{t: time.Date(2026, 12, 2, 13, 4, 0, 0, time.UTC)}
	boot := &bootIDs{id: "boot-A"}
	opt := Options{Now: clk.Now, BootID: boot.BootID}
	j := openTest(t, path, opt)

	from, to := testState(t, "v1.34.4"), testState(t, "v1.34.5")
	must(t, j.PutNodeState(from))
	fromYAML, err := from.Marshal()
	must(t, err)

	txn, err := j.Begin(Txn{Kind: KindUpgrade, ID: "ignored", Phase: PhaseCommitted, From: fromYAML, Release: []byte("release: v1.34.5\n"), Changed: []string{"kube-apiserver", "kube-scheduler"}})
	must(t, err)
	if !regexp.MustCompile(`^20261202T130[0-9]{3}Z-[0-9a-f]{4}$`).MatchString(txn.ID) {
		t.Errorf("txn id %q is not <UTC time>-<4 hex>", txn.ID)
	}
	if txn.Phase != PhasePlanned || txn.Started.IsZero() || !txn.Updated.Equal(txn.Started) || !txn.Ended.IsZero() {
		t.Errorf("Begin returned %+v", txn)
	}
	if _, err := j.Begin(Txn{Kind: KindUpgrade}); !errors.Is(err, ErrTxnOpen) || !strings.Contains(err.Error(), txn.ID) {
		t.Errorf("Begin while %s is open: %v, want ErrTxnOpen naming it", txn.ID, err)
	}
	if err := j.PutNodeState(to); !errors.Is(err, ErrTxnOpen) {
		t.Errorf("PutNodeState while a txn is open: %v, want ErrTxnOpen", err)
	}
	open, err := j.OpenTxn()
	must(t, err)
	if open == nil || !reflect.DeepEqual(*open, txn) {
		t.Fatalf("OpenTxn() = %+v, want %+v", open, txn)
	}

	// A manifest write step: the mark before it, then "written + next started" in one commit.
	mark := &proc.Mark{Ticks: 12345, BootID: "boot-A"}
	recs, err := j.Append(txn.ID, PhaseSnapshotted, Record{Step: StepEtcdRestored, AsideDir: "dir"})
	must(t, err)
	if len(recs) != 1 || recs[0].Seq != 1 || recs[0].BootID != "boot-A" || recs[0].Phase != PhaseSnapshotted || recs[0].Time.IsZero() {
		t.Errorf("Append returned %+v", recs)
	}
	must(t, j.Update(txn.ID, func(t *Txn) error {
		t.SnapshotDir = "/var/lib/stratum/snapshots/x"
		t.EtcdBackup = []byte(`{"path":"/x.db"}`)
		t.Phase = PhaseApplying
		return nil
	}, Record{Step: StepMark, Component: "kube-apiserver", ProcMark: mark, Stamp: "2026-12-02T13:05:00Z"}))

	c0 := j.Commits()
	boot.set("boot-B") // a reboot between writes: later records carry the new id
	recs, err = j.Append(txn.ID, PhaseApplying,
		Record{Step: StepDone, Component: "kube-apiserver"},
		Record{Step: StepMark, Component: "kube-scheduler", ProcMark: &proc.Mark{Ticks: 99, BootID: "boot-B"}})
	must(t, err)
	if d := j.Commits() - c0; d != 1 {
		t.Errorf("Append of two records took %d commits, want 1", d)
	}
	if len(recs) != 2 || recs[0].Seq != 3 || recs[1].Seq != 4 || recs[0].BootID != "boot-B" || recs[1].ProcMark.Ticks != 99 {
		t.Errorf("Append returned %+v", recs)
	}

	all, err := j.Records(txn.ID)
	must(t, err)
	wantSteps := []Step{StepEtcdRestored, StepMark, StepDone, StepMark}
	wantBoots := []string{"boot-A", "boot-A", "boot-B", "boot-B"}
	if len(all) != len(wantSteps) {
		t.Fatalf("Records() = %+v", all)
	}
	for i, r := range all {
		if r.Seq != uint64(i+1) || r.Step != wantSteps[i] || r.BootID != wantBoots[i] {
			t.Errorf("record %d = %+v, want seq %d step %s boot %s", i, r, i+1, wantSteps[i], wantBoots[i])
		}
	}
	if all[1].ProcMark == nil || *all[1].ProcMark != *mark || all[1].Stamp != "2026-12-02T13:05:00Z" || all[1].Phase != PhaseApplying {
		t.Errorf("mark record = %+v", all[1])
	}
	if !reflect.DeepEqual(all[2:], recs) {
		t.Errorf("Records() tail %+v differs from what Append returned %+v", all[2:], recs)
	}

	// Commit: state, phase, Ended, open marker and the last record in one commit.
	c0 = j.Commits()
	must(t, j.Commit(txn.ID, to, Record{Step: StepVerified}))
	if d := j.Commits() - c0; d != 1 {
		t.Errorf("Commit took %d commits, want 1", d)
	}
	must(t, j.Close())

	j = openTest(t, path, opt)
	got, err := j.NodeState()
	must(t, err)
	if !reflect.DeepEqual(got, to) {
		t.Errorf("node state after Commit = %+v, want %+v", got, to)
	}
	if open, err := j.OpenTxn(); open != nil || err != nil {
		t.Errorf("OpenTxn() after Commit = %+v, %v", open, err)
	}
	done, err := j.Txn(txn.ID)
	must(t, err)
	toYAML, _ := to.Marshal()
	if done.Phase != PhaseCommitted || done.Ended.IsZero() || !bytes.Equal(done.To, toYAML) || !bytes.Equal(done.From, fromYAML) ||
		done.SnapshotDir != "/var/lib/stratum/snapshots/x" || string(done.EtcdBackup) != `{"path":"/x.db"}` ||
		!reflect.DeepEqual(done.Changed, []string{"kube-apiserver", "kube-scheduler"}) || done.Kind != KindUpgrade {
		t.Errorf("committed txn = %+v", done)
	}
	all, err = j.Records(txn.ID)
	must(t, err)
	if len(all) != 5 || all[4].Step != StepVerified || all[4].Phase != PhaseCommitted || all[4].BootID != "boot-B" {
		t.Errorf("records after Commit and reopen = %+v", all)
	}

	// A closed transaction never changes.
	c0 = j.Commits()
	closedOps := map[string]func() error{
		"Append":      func() error { _, err := j.Append(txn.ID, PhaseApplying, Record{Step: StepMark}); return err },
		"Append none": func() error { _, err := j.Append(txn.ID, PhaseRollingBack); return err },
		"Update":      func() error { return j.Update(txn.ID, func(t *Txn) error { t.Phase = PhaseApplying; return nil }) },
		"Update same": func() error { return j.Update(txn.ID, func(t *Txn) error { return nil }) },
		"Commit":      func() error { return j.Commit(txn.ID, from) },
		"Finish":      func() error { return j.Finish(txn.ID, PhaseRolledBack, "late", nil) },
	}
	for name, op := range closedOps {
		if err := op(); !errors.Is(err, ErrTxnClosed) {
			t.Errorf("%s on a committed txn: %v, want ErrTxnClosed", name, err)
		}
	}
	if j.Commits() != c0 {
		t.Errorf("refused writes committed %d times", j.Commits()-c0)
	}

	// A second transaction that rolls back leaves the node state alone.
	txn2, err := j.Begin(Txn{Kind: KindRollbackLast, From: toYAML, To: fromYAML})
	must(t, err)
	_, err = j.Append(txn2.ID, PhaseRollingBack, Record{Step: StepRestored, Component: "kube-apiserver"})
	must(t, err)
	must(t, j.Finish(txn2.ID, PhaseRolledBack, "kube-apiserver did not become active", []byte(`{"k":1}`), Record{Step: StepRestored}))
	got, err = j.NodeState()
	must(t, err)
	if !reflect.DeepEqual(got, to) {
		t.Errorf("node state changed by a rolled-back txn: %+v", got)
	}
	fin, err := j.Txn(txn2.ID)
	must(t, err)
	if fin.Phase != PhaseRolledBack || fin.Reason != "kube-apiserver did not become active" || string(fin.Detail) != `{"k":1}` || fin.Ended.IsZero() {
		t.Errorf("finished txn = %+v", fin)
	}
	if open, err := j.OpenTxn(); open != nil || err != nil {
		t.Errorf("OpenTxn() after Finish = %+v, %v", open, err)
	}
	must(t, j.PutNodeState(from)) // allowed again: nothing is open

	h, err := j.History(0)
	must(t, err)
	if len(h) != 2 || h[0].ID != txn2.ID || h[1].ID != txn.ID {
		t.Errorf("History(0) = %v, want [%s %s]", ids(h), txn2.ID, txn.ID)
	}
	if h, err := j.History(1); err != nil || len(h) != 1 || h[0].ID != txn2.ID {
		t.Errorf("History(1) = %v, %v", ids(h), err)
	}
}

func ids(h []Txn) []string {
	var out []string
	for _, t := range h {
		out = append(out, t.ID)
	}
	return out
}

func TestRefusedWritesStoreNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j := openTest(t, path, Options{BootID: func() (string, error) { return "b", nil }})
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(t, err)
	_, err = j.Append(txn.ID, PhaseApplying, Record{Step: StepMark})
	must(t, err)
	bad := testState(t, "v1.34.5")
	bad.NodeName = "Not A DNS Name"
	cases := map[string]func() error{
		"unknown kind":          func() error { _, err := j.Begin(Txn{Kind: "downgrade"}); return err },
		"unknown txn Append":    func() error { _, err := j.Append("nope", PhaseApplying, Record{}); return err },
		"unknown txn Update":    func() error { return j.Update("nope", func(*Txn) error { return nil }) },
		"unknown txn Commit":    func() error { return j.Commit("nope", testState(t, "v1.34.5")) },
		"unknown phase":         func() error { _, err := j.Append(txn.ID, "dancing", Record{}); return err },
		"terminal phase Append": func() error { _, err := j.Append(txn.ID, PhaseCommitted); return err },
		"bad record phase":      func() error { _, err := j.Append(txn.ID, PhaseApplying, Record{Phase: "x"}); return err },
		"Update fn error": func() error {
			return j.Update(txn.ID, func(t *Txn) error { t.Reason = "half"; return errors.New("engine said no") }, Record{Step: StepMark})
		},
		"Update changes id":     func() error { return j.Update(txn.ID, func(t *Txn) error { t.ID = "other"; return nil }) },
		"Update changes kind":   func() error { return j.Update(txn.ID, func(t *Txn) error { t.Kind = KindRollbackLast; return nil }) },
		"Update terminal phase": func() error { return j.Update(txn.ID, func(t *Txn) error { t.Phase = PhaseRolledBack; return nil }) },
		"Finish committed":      func() error { return j.Finish(txn.ID, PhaseCommitted, "", nil) },
		"Finish open phase":     func() error { return j.Finish(txn.ID, PhaseRollingBack, "", nil) },
		"Commit invalid state":  func() error { return j.Commit(txn.ID, bad) },
		"Commit nil state":      func() error { return j.Commit(txn.ID, nil) },
	}
	before, err := j.Txn(txn.ID)
	must(t, err)
	c0 := j.Commits()
	for name, op := range cases {
		if err := op(); err == nil {
			t.Errorf("%s: succeeded", name)
		} else if !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error does not name the journal: %v", name, err)
		}
	}
	if j.Commits() != c0 {
		t.Errorf("refused writes committed %d times", j.Commits()-c0)
	}
	after, err := j.Txn(txn.ID)
	must(t, err)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("refused writes changed the txn:\n%+v\n%+v", before, after)
	}
	if recs, err := j.Records(txn.ID); err != nil || len(recs) != 1 {
		t.Errorf("records after refused writes = %+v, %v", recs, err)
	}
	for name, err := range map[string]error{
		"Txn":     func() error { _, err := j.Txn("nope"); return err }(),
		"Records": func() error { _, err := j.Records("nope"); return err }(),
		"Append":  func() error { _, err := j.Append("nope", PhaseApplying); return err }(),
	} {
		if !errors.Is(err, ErrNoTxn) {
			t.Errorf("%s of an unknown txn: %v, want ErrNoTxn", name, err)
		}
	}
}

func TestBootIDFailureStoresNothing(t *testing.T) {
	j := openTest(t, filepath.Join(t.TempDir(), "stratum.db"), Options{BootID: func() (string, error) { return "", errors.New("no /proc") }})
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(t, err)
	if _, err := j.Append(txn.ID, PhaseApplying, Record{Step: StepMark}); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Errorf("Append without a boot id: %v", err)
	}
	if got, _ := j.Txn(txn.ID); got.Phase != PhasePlanned {
		t.Errorf("phase changed to %s by a failed Append", got.Phase)
	}
}

func TestDefaultBootID(t *testing.T) {
	want, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("no boot id on this system: %v", err)
	}
	j := openTest(t, filepath.Join(t.TempDir(), "stratum.db"), Options{})
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(t, err)
	recs, err := j.Append(txn.ID, PhaseApplying, Record{Step: StepMark})
	must(t, err)
	if recs[0].BootID != strings.TrimSpace(string(want)) {
		t.Errorf("BootID = %q, want %q", recs[0].BootID, want)
	}
}

// TestValuesAreCopies checks that nothing handed in or out aliases stored
// data or bbolt's memory map: the returned values are read after Close,
// when the map is gone (a slice into it would fault).
func TestValuesAreCopies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j, err := Open(path, Options{BootID: func() (string, error) { return "boot", nil }})
	must(t, err)
	must(t, j.PutNodeState(testState(t, "v1.34.4")))
	from := []byte("from: yaml\n")
	changed := []string{"etcd"}
	txn, err := j.Begin(Txn{Kind: KindUpgrade, From: from, Changed: changed})
	must(t, err)
	from[0], changed[0] = 'X', "X" // the caller's slices, after Begin
	txn.From[1], txn.Changed = 'Y', nil
	mark := &proc.Mark{Ticks: 1, BootID: "boot"}
	recs, err := j.Append(txn.ID, PhaseApplying, Record{Step: StepMark, ProcMark: mark})
	must(t, err)
	mark.Ticks = 2
	recs[0].ProcMark.Ticks = 3

	got, err := j.Txn(txn.ID)
	must(t, err)
	if string(got.From) != "from: yaml\n" || !reflect.DeepEqual(got.Changed, []string{"etcd"}) {
		t.Errorf("stored txn changed through a caller's slice: From %q Changed %v", got.From, got.Changed)
	}
	stored, err := j.Records(txn.ID)
	must(t, err)
	if stored[0].ProcMark.Ticks != 1 {
		t.Errorf("stored mark changed through a caller's pointer: %+v", stored[0].ProcMark)
	}
	got.From[0] = 'Z'
	again, err := j.Txn(txn.ID)
	must(t, err)
	if string(again.From) != "from: yaml\n" {
		t.Errorf("mutating a returned Txn changed the next read: %q", again.From)
	}
	hist, err := j.History(0)
	must(t, err)
	open, err := j.OpenTxn()
	must(t, err)
	st, err := j.NodeState()
	must(t, err)

	// Churn pages, then unmap them.
	for i := range 200 {
		_, err := j.Append(txn.ID, PhaseApplying, Record{Step: StepMark, Stamp: strings.Repeat("n", i*10)})
		must(t, err)
	}
	must(t, j.Close())
	sum := 0
	for _, b := range [][]byte{again.From, hist[0].From, open.From, []byte(st.NodeName), []byte(stored[0].Step), []byte(stored[0].BootID)} {
		for _, c := range b {
			sum += int(c)
		}
	}
	if string(open.From) != "from: yaml\n" || st.NodeName != "cp-1" || stored[0].Step != "mark" || sum == 0 {
		t.Errorf("values read after Close are wrong: %q %q %q", open.From, st.NodeName, stored[0].Step)
	}
}

func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j, err := Open(path, Options{})
	must(t, err)
	must(t, j.PutNodeState(testState(t, "v1.34.4")))
	txn, err := j.Begin(Txn{Kind: KindUpgrade})
	must(t, err)
	must(t, j.Close())
	before := readFile(t, path)

	ro := openTest(t, path, Options{ReadOnly: true})
	if st, err := ro.NodeState(); err != nil || st.KubernetesVersion != "v1.34.4" {
		t.Errorf("read-only NodeState() = %v, %v", st, err)
	}
	if open, err := ro.OpenTxn(); err != nil || open == nil || open.ID != txn.ID {
		t.Errorf("read-only OpenTxn() = %v, %v", open, err)
	}
	if _, err := ro.Append(txn.ID, PhaseApplying); err == nil {
		t.Error("read-only Append succeeded")
	}
	must(t, ro.Close())
	if !bytes.Equal(before, readFile(t, path)) {
		t.Error("read-only use changed the file")
	}
}

// TestIDsUnique begins many transactions within one clock second.
func TestIDsUnique(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	j := openTest(t, filepath.Join(t.TempDir(), "stratum.db"), Options{Now: func() time.Time { return now }})
	seen := map[string]bool{}
	var order []string
	for range 50 {
		txn, err := j.Begin(Txn{Kind: KindUpgrade})
		must(t, err)
		if seen[txn.ID] {
			t.Fatalf("id %s given twice", txn.ID)
		}
		seen[txn.ID] = true
		order = append(order, txn.ID)
		must(t, j.Finish(txn.ID, PhaseRolledBack, "test", nil))
	}
	h, err := j.History(0)
	must(t, err)
	for i, txn := range h {
		if txn.ID != order[len(order)-1-i] {
			t.Fatalf("History is not newest first at %d: %s, want %s", i, txn.ID, order[len(order)-1-i])
		}
	}
}

func TestPhaseOpen(t *testing.T) {
	open := map[Phase]bool{
		PhasePlanned: true, PhaseSnapshotted: true, PhaseApplying: true, PhaseVerifying: true, PhaseRollingBack: true,
		PhaseCommitted: false, PhaseRolledBack: false, PhaseRollbackFailed: false, "": false, "bogus": false,
	}
	for p, want := range open {
		if p.Open() != want {
			t.Errorf("%q.Open() = %v, want %v", p, p.Open(), want)
		}
	}
	if len(Phases) != 8 {
		t.Errorf("Phases has %d entries", len(Phases))
	}
}
