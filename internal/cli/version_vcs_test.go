package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionOfAPlainBuild: stratum-upgrade built with plain go build (no
// -ldflags, as go install ./cmd/stratum-upgrade builds it) in a git clone
// says which commit it is, from the VCS stamp in its build info: the
// clone's HEAD, not modified, and a module pseudo version naming it rather
// than "dev". The clone is made from this repository's HEAD (a work tree
// of git worktree gets no stamp from go build: its .git is a file), and
// built with -trimpath and CGO_ENABLED=0, make demo's configuration, so
// that a warm build cache serves it.
func TestVersionOfAPlainBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds stratum-upgrade")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr)
		}
		return strings.TrimSpace(string(out))
	}
	head := run(repo, nil, "git", "rev-parse", "HEAD")
	clone := filepath.Join(t.TempDir(), "clone")
	run(repo, nil, "git", "clone", "-q", "--shared", "--no-checkout", repo, clone)
	run(clone, nil, "git", "checkout", "-q", "--detach", head)
	bin := filepath.Join(t.TempDir(), "stratum-upgrade")
	run(clone, []string{"CGO_ENABLED=0", "GOFLAGS=-buildvcs=true"}, "go", "build", "-trimpath", "-o", bin, "./cmd/stratum-upgrade")

	var v versionReport
	out := run(clone, []string{"STRATUM_CONFIG="}, bin, "version", "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	if v.Commit == nil || *v.Commit != head || v.Modified {
		t.Errorf("version of a plain build at %s: %s; want that commit, not modified", head, out)
	}
	if v.Version == "dev" || !strings.Contains(v.Version, head[:12]) {
		t.Errorf("version of a plain build at %s: %q; want the module's pseudo version naming the commit", head, v.Version)
	}
	text := run(clone, []string{"STRATUM_CONFIG="}, bin, "version")
	if !strings.Contains(text, "commit: "+head) || strings.Contains(text, "(modified)") {
		t.Errorf("version of a plain build:\n%s\nwant commit %s, not modified", text, head)
	}
}
