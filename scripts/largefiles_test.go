// Package scripts holds the tests of the shell scripts beside them.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// git runs git in dir, failing the test on an error.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestCheckLargeFiles: check-large-files.sh fails naming a tracked 2 MiB
// file outside testdata/ (also once it is committed and gone from the
// work tree: the index is what counts), and passes once the file is under
// a testdata/ directory; small files never count.
func TestCheckLargeFiles(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("needs git")
	}
	script, err := filepath.Abs("check-large-files.sh")
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	git(t, repo, "init", "-q")
	write := func(name string, size int) {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func() (string, error) {
		out, err := exec.Command(script, repo).CombinedOutput()
		return string(out), err
	}
	write("main.go", 100)
	write("bin dir/dist", 2<<20)
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "a binary by mistake")
	if err := os.Remove(filepath.Join(repo, "bin dir", "dist")); err != nil {
		t.Fatal(err)
	}
	out, err := check()
	if err == nil || !strings.Contains(out, "bin dir/dist (2097152 bytes)") || strings.Contains(out, "main.go") {
		t.Fatalf("a tracked 2 MiB file outside testdata/: %v\n%s\nwant a failure naming bin dir/dist alone", err, out)
	}

	git(t, repo, "checkout", "--", "bin dir/dist")
	if err := os.MkdirAll(filepath.Join(repo, "pkg", "testdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "mv", "bin dir/dist", "pkg/testdata/fixture.bin")
	if out, err := check(); err != nil {
		t.Fatalf("the 2 MiB file under testdata/: %v\n%s\nwant it to pass", err, out)
	}
}
