package cli

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// A journal written before the manifest directory was recorded (it has a
// node state but no state/manifest_dir) adopts the directory of the first
// command that opens it for writing; from then on another one is refused.
func TestLegacyJournalAdoptsManifestDir(t *testing.T) {
	tmp := t.TempDir()
	stateDir, mdir, other := filepath.Join(tmp, "state"), filepath.Join(tmp, "manifests"), filepath.Join(tmp, "other")
	b, err := os.ReadFile("../../testdata/states/default-vip.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), "etcd:\n  memberName: cp-1\n", "etcd:\n  memberName: cp-1\n  dataDir: "+filepath.Join(tmp, "etcd")+"\n", 1)
	y += "pkiDir: " + filepath.Join(tmp, "pki") + "\nkubeconfigDir: " + filepath.Join(tmp, "kube") + "\nconfigDir: " + filepath.Join(tmp, "config") + "\n"
	st, err := nodestate.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(filepath.Join(stateDir, JournalFile), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.PutNodeState(st); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(configEnv, "")
	run := func(code int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if got := Main(append(args, "--state-dir", stateDir, "--proc-scope", "self"), &out, &errb); got != code {
			t.Fatalf("%v: exit %d, want %d: %s", args, got, code, errb.String())
		}
		return errb.String()
	}
	// render creates no manifest directory: kubelet's is there.
	if err := os.Mkdir(mdir, 0o700); err != nil {
		t.Fatal(err)
	}
	run(ExitOK, "render", "--manifest-dir", mdir)
	j, err = journal.Open(filepath.Join(stateDir, JournalFile), journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := j.ManifestDir()
	j.Close()
	if err != nil || got != mdir {
		t.Fatalf("recorded manifest dir %q, %v; want %s", got, err, mdir)
	}
	if msg := run(ExitError, "render", "--manifest-dir", other); !strings.Contains(msg, "manages the manifest directory "+mdir) {
		t.Errorf("render into another dir after adoption: %s", msg)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the refused render created %s: %v", other, err)
	}
}

// A refused init leaves nothing behind (review finding): a coordinated
// init keeps etcd's member count and endpoints beside its new journal
// before the rollout lock refuses it (busy, halted); the removal of what
// it created takes them too, and with them the state directory it made.
// Files of the cluster kept before the init stay.
func TestRefusedInitRemovesTheClusterRecords(t *testing.T) {
	tmp := t.TempDir()
	g := &globals{stateDir: filepath.Join(tmp, "state"), log: slog.New(slog.DiscardHandler)}
	c := g.created()
	if err := os.MkdirAll(g.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{JournalFile, cluster.MembersFile, cluster.EndpointsFile} {
		if err := os.WriteFile(filepath.Join(g.stateDir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.remove(g)
	if _, err := os.Lstat(g.stateDir); !errors.Is(err, fs.ErrNotExist) {
		entries, _ := os.ReadDir(g.stateDir)
		t.Fatalf("the refused init's state directory is left (%v): %v", err, entries)
	}

	// A state directory that held the cluster's records before init.
	if err := os.MkdirAll(g.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	members := filepath.Join(g.stateDir, cluster.MembersFile)
	if err := os.WriteFile(members, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	c = g.created()
	for _, name := range []string{JournalFile, cluster.EndpointsFile} {
		if err := os.WriteFile(filepath.Join(g.stateDir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.remove(g)
	entries, err := os.ReadDir(g.stateDir)
	if err != nil || len(entries) != 1 || entries[0].Name() != cluster.MembersFile {
		t.Fatalf("state directory after a refused init: %v %v; want only the %s kept before it", entries, err, cluster.MembersFile)
	}
}
