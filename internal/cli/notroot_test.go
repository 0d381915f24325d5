package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ciq/stratum-upgrade/journal"
)

// nobody is the uid and gid the tests below run stratum-upgrade as.
const nobody = 65534

// runAsNobody runs this test binary, copied where uid 65534 can execute
// it, as stratum-upgrade ARGS with uid and gid 65534 and no config file.
func runAsNobody(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{mainEnv + "=1", configEnv + "=", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// copyExecutable copies this test binary into a fresh directory that
// everyone may enter, as mode 0755.
func copyExecutable(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "stratum-notroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	bin := filepath.Join(dir, "stratum-upgrade")
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// Issue 17 item 5: run by a user other than root, a command that cannot
// open the state or manifest directory says "must be run as root", naming
// both, instead of a permission error that suggests another --state-dir;
// commands that need no directory, and status where it can read, still
// work. Run for real as uid 65534 (the test must run as root to switch).
func TestNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run stratum-upgrade as uid 65534: make test as root")
	}
	bin := copyExecutable(t)
	root := filepath.Dir(bin) // 0755, root's
	stateDir := filepath.Join(root, "state")
	manifestDir := filepath.Join(root, "manifests")
	for _, d := range []string{stateDir, manifestDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	j, err := journal.Open(filepath.Join(stateDir, JournalFile), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join(root, "release.yaml")
	if err := os.WriteFile(rel, []byte("apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\nimages:\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirs := []string{"--state-dir", stateDir, "--manifest-dir", manifestDir, "--proc-scope", "self"}
	want := fmt.Sprintf("stratum-upgrade: must be run as root: the state directory %s and the manifest directory %s are root's (", stateDir, manifestDir)

	for _, args := range [][]string{
		{"status"}, {"render"}, {"resume"}, {"rollback"}, {"history"}, {"plan", "--to", rel}, {"run", "--to", rel},
	} {
		code, _, stderr := runAsNobody(t, bin, append(args, dirs...)...)
		if code != ExitError || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "choose another") {
			t.Errorf("%v as uid %d: exit %d, stderr %q; want exit 1 and %q...", args, nobody, code, stderr, want)
		}
	}
	// init into a state directory it cannot create.
	newState := filepath.Join(stateDir, "sub")
	code, _, stderr := runAsNobody(t, bin, "init", "--state", "/nonexistent.yaml", "--state-dir", newState)
	if code != ExitUsage || !strings.Contains(stderr, "/nonexistent.yaml") {
		t.Errorf("init with a missing state file as uid %d: exit %d, %q (the file comes first)", nobody, code, stderr)
	}

	// No directory needed.
	for _, args := range [][]string{{"version"}, {"--help"}, {"completion", "bash"}} {
		if code, stdout, stderr := runAsNobody(t, bin, args...); code != ExitOK || stdout == "" {
			t.Errorf("%v as uid %d: exit %d, stderr %q", args, nobody, code, stderr)
		}
	}
	// status with no journal in a directory it may read.
	open := filepath.Join(root, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runAsNobody(t, bin, "status", "--state-dir", open, "--manifest-dir", open, "--proc-scope", "self")
	if code != ExitOK || !strings.Contains(stdout, "journal:      "+filepath.Join(open, JournalFile)) {
		t.Errorf("status on a readable state dir as uid %d: exit %d, stdout %q, stderr %q", nobody, code, stdout, stderr)
	}
}

// asRoot leaves root's errors, non-permission errors and usage errors as
// they are.
func TestAsRoot(t *testing.T) {
	perm := &os.PathError{Op: "open", Path: "/var/lib/stratum/stratum.db", Err: syscall.EACCES}
	g := &globals{stateDir: "/var/lib/stratum", manifestDir: "/etc/kubernetes/manifests"}
	defer func() { geteuid = os.Geteuid }()

	geteuid = func() int { return 1000 }
	got := g.asRoot(fmt.Errorf("state directory: %w", perm))
	want := "must be run as root: the state directory /var/lib/stratum and the manifest directory /etc/kubernetes/manifests are root's (open /var/lib/stratum/stratum.db: permission denied)"
	if got.Error() != want || ExitCode(got) != ExitError {
		t.Errorf("asRoot = %q (exit %d), want %q", got, ExitCode(got), want)
	}
	if err := usage(perm); g.asRoot(err) != err {
		t.Errorf("asRoot rewrote a usage error")
	}
	if err := errors.New("disk on fire"); g.asRoot(err) != err {
		t.Errorf("asRoot rewrote a non-permission error")
	}
	geteuid = func() int { return 0 }
	if err := error(perm); g.asRoot(err) != err {
		t.Errorf("asRoot rewrote root's permission error")
	}
}
