package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the helper process the tests run under
// component-like names: started with helperEnv set, TestMain runs the helper
// instead of the tests. argv[0] is set per start, so no copy is needed for
// the loose argv[0] rule, and a symlink stands in for a binary on a path.
const helperEnv = "STRATUM_PROC_TEST_HELPER"

// helperLife bounds a helper that is somehow never cleaned up.
const helperLife = 3 * time.Minute

var helperPath string

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		runHelper(mode)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "find test binary:", err)
		os.Exit(2)
	}
	helperPath = exe
	os.Exit(m.Run())
}

// runHelper is the helper process: "sleep" sleeps and dies of SIGTERM as a
// host process does, "ignoreterm" ignores SIGTERM, "exit" exits at once.
// The sleeping modes print "ready" once set up.
func runHelper(mode string) {
	switch mode {
	case "exit":
		os.Exit(0)
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
	case "sleep":
	case "health200", "health500":
		serveHealth(mode)
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		os.Exit(2)
	}
	fmt.Println("ready")
	time.Sleep(helperLife)
	os.Exit(0)
}

var nameSeq atomic.Int64

// uniqueName returns a binary name no other process on the machine runs
// under: the test's name, this test process's pid and a counter.
func uniqueName(t *testing.T, what string) string {
	t.Helper()
	base := regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-")
	return fmt.Sprintf("proctest-%s-%s-%d-%d", what, base, os.Getpid(), nameSeq.Add(1))
}

// startHelper runs the helper with argv[0] set to argv0 in its own process
// group, waits until it is set up (modes other than "exit"), and kills the
// group at cleanup unless the test has reaped it.
func startHelper(t testing.TB, argv0, mode string) *exec.Cmd {
	t.Helper()
	return startHelperAt(t, helperPath, argv0, mode)
}

func startHelperAt(t testing.TB, path, argv0, mode string) *exec.Cmd {
	t.Helper()
	cmd := &exec.Cmd{
		Path:   path,
		Args:   []string{argv0},
		Env:    append(os.Environ(), helperEnv+"="+mode),
		Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper %s: %v", argv0, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			// Not reaped yet, so the group id is still ours.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	if mode != "exit" {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			t.Fatalf("helper %s did not get ready: %q, %v", argv0, line, err)
		}
	}
	return cmd
}

// linkHelper puts the helper binary at dir/name (a symlink), for a process
// whose argv[0] is a full path.
func linkHelper(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(helperPath, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// self is the host scanner scoped to this test process's tree.
func self() *Scanner { return Host().Within(os.Getpid()) }

// fakeRoot lays out a minimal fake procfs under a temp dir: uptime and
// boot_id, plus the given files (relative path -> content).
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	all := map[string]string{
		"uptime":                    "12345.67 999.00\n",
		"sys/kernel/random/boot_id": "11111111-2222-3333-4444-555555555555\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for rel, content := range all {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// statLine builds a /proc/<pid>/stat line with the given comm, state, ppid
// and start ticks.
func statLine(pid int, comm string, state byte, ppid int, ticks uint64) string {
	// Fields 5..21 are zeros, 22 is starttime, and a few trail it.
	return fmt.Sprintf("%d (%s) %c %d 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 1000 100 0 0\n",
		pid, comm, state, ppid, ticks)
}

func itoa(i int) string { return strconv.Itoa(i) }

func isDeadline(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
