package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/journal"
)

// complete runs cobra's __complete for args and returns the offered words.
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(append([]string{"__complete"}, args...), &out, &errb); code != ExitOK {
		t.Fatalf("__complete %v: exit %d: %s", args, code, errb.String())
	}
	var words []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.HasPrefix(l, ":") {
			w, _, _ := strings.Cut(l, "\t")
			words = append(words, w)
		}
	}
	return words
}

// TestCompletion: restart, stop and start complete component names (not
// the ones named already), -o its formats, history TXN the journal's
// transaction ids.
func TestCompletion(t *testing.T) {
	for _, verb := range []string{"restart", "stop", "start", "audit"} {
		got := strings.Join(complete(t, verb, ""), ",")
		if !strings.Contains(got, "etcd") || !strings.Contains(got, "kube-scheduler") {
			t.Errorf("%s completes %q, want the component names", verb, got)
		}
	}
	if got := strings.Join(complete(t, "stop", "etcd", ""), ","); strings.Contains(got, "etcd,") || !strings.Contains(got, "kube-apiserver") {
		t.Errorf("stop etcd completes %q, want the other components", got)
	}
	if got := strings.Join(complete(t, "status", "-o", ""), ","); got != "text,json,yaml" {
		t.Errorf("-o completes %q", got)
	}

	dir := t.TempDir()
	j, err := journal.Open(filepath.Join(dir, JournalFile), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	txn, err := j.Begin(journal.Txn{Kind: journal.KindUpgrade, Changed: []string{"kube-scheduler"}})
	if err == nil {
		err = j.Finish(txn.ID, journal.PhaseRolledBack, "test", nil)
	}
	if cerr := j.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := complete(t, "history", "--state-dir", dir, "--manifest-dir", t.TempDir(), ""); len(got) != 1 || got[0] != txn.ID {
		t.Errorf("history completes %v, want [%s]", got, txn.ID)
	}
}

// TestCompletionUnknownShell: completion for a shell it does not know is
// bad usage (exit 2), not its help with exit 0; --help -o json is the help.
func TestCompletionUnknownShell(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"completion", "tcsh"}, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: exit %d: %s", code, errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := Main([]string{"completion", "bash"}, &out, &errb); code != ExitOK || !strings.Contains(out.String(), "bash completion") {
		t.Errorf("completion bash: exit %d: %s", code, errb.String())
	}
	for _, args := range [][]string{{"--help", "-o", "json"}, {"-o", "json", "--help"}, {"status", "--help", "-o", "yaml"}} {
		out.Reset()
		errb.Reset()
		if code := Main(args, &out, &errb); code != ExitOK || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
}
