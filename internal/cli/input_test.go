package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInputFilesBounded: a node state or release file over 1 MiB is bad
// usage naming its size, read no further than the limit (a sparse 200 MB
// file here), and nothing is created.
func TestInputFilesBounded(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(200 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	state := filepath.Join(dir, "state")
	for _, args := range [][]string{{"init", "--state", big}, {"plan", "--to", big}, {"run", "--to", big}, {"apply", "--state", big}} {
		var out, errb bytes.Buffer
		code := Main(append(args, "--state-dir", state, "--manifest-dir", filepath.Join(dir, "m")), &out, &errb)
		if code != ExitUsage || !strings.Contains(errb.String(), "is too large: 209715200 bytes, more than the 1048576 (1 MiB)") {
			t.Errorf("%v: exit %d: %s", args, code, errb.String())
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("a refused input created the state directory: %v", err)
	}
}

// TestStatusSuggestsAdoption: status with no journal, on a manifest
// directory kubeadm wrote, suggests init --from-kubeadm, not a state file;
// on one stratum rendered (kubeadm's annotations and its own), init --state.
func TestStatusSuggestsAdoption(t *testing.T) {
	fixture := filepath.Join("..", "..", "testdata", "kubeadm", "v1.37.2", "defaults", "manifests")
	run := func(mdir string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := Main([]string{"status", "--state-dir", t.TempDir(), "--manifest-dir", mdir, "--proc-scope", "self"}, &out, &errb); code != ExitOK {
			t.Fatalf("status: exit %d: %s", code, errb.String())
		}
		return out.String()
	}
	if out := run(fixture); !strings.Contains(out, "init --from-kubeadm --kubeadm-config FILE") {
		t.Errorf("status on kubeadm's manifests does not suggest adopting them:\n%s", out)
	}
	if out := run(t.TempDir()); !strings.Contains(out, "init --state FILE") || strings.Contains(out, "from-kubeadm") {
		t.Errorf("status on an empty manifest directory:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(fixture, "kube-apiserver.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ours := t.TempDir()
	b = bytes.Replace(b, []byte("  annotations:\n"), []byte("  annotations:\n    stratum.ciq.com/restarted-at: x\n"), 1)
	if err := os.WriteFile(filepath.Join(ours, "kube-apiserver.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(ours); strings.Contains(out, "from-kubeadm") {
		t.Errorf("status on stratum's render suggests adopting it:\n%s", out)
	}
}
