package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
