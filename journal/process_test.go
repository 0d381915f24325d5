package journal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The test binary re-executes itself as a child journal user when
// childEnv is set: "hold" opens the journal, says "ready" and holds it
// until stdin closes; "crash" appends a record and SIGKILLs itself.
const (
	childEnv     = "STRATUM_JOURNAL_TEST_CHILD"
	childPathEnv = "STRATUM_JOURNAL_TEST_PATH"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode, os.Getenv(childPathEnv)))
	}
	os.Exit(m.Run())
}

func child(mode, path string) int {
	// Never outlive a parent that forgot us.
	time.AfterFunc(60*time.Second, func() {
		fmt.Fprintln(os.Stderr, "child: parent did not release me within 60s")
		os.Exit(3)
	})
	j, err := Open(path, Options{BootID: func() (string, error) { return "boot-child", nil }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	switch mode {
	case "hold":
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
		if err := j.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 2
		}
		return 0
	case "crash":
		txn, err := j.Begin(Txn{Kind: KindUpgrade, Changed: []string{"kube-apiserver"}})
		if err == nil {
			_, err = j.Append(txn.ID, PhaseApplying, Record{Step: StepMark, Component: "kube-apiserver", Stamp: "s1"})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 2
		}
		fmt.Println(txn.ID)
		// No Close, no deferred work: the process dies right after Append returned.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return 4
	}
	fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
	return 2
}

type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{} // closed when the child has exited and was reaped
	err   error         // cmd.Wait's result, valid once done is closed
}

// startChild runs the test binary as a child in mode on path, in its own
// process group, killed and reaped at cleanup even when the test fails.
func startChild(t *testing.T, mode, path string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childPathEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	c := &childProc{cmd: cmd, stdin: stdin, lines: make(chan string, 4), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-c.done:
			return
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // our child's own group
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Errorf("child %d did not exit within 10s of SIGKILL", cmd.Process.Pid)
		}
	})
	return c
}

// line waits for the child's next stdout line.
func (c *childProc) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("child %d exited before printing a line", c.cmd.Process.Pid)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("child %d printed nothing within 30s", c.cmd.Process.Pid)
	}
	return ""
}

// wait waits for the child to exit.
func (c *childProc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(30 * time.Second):
		t.Fatalf("child %d did not exit within 30s", c.cmd.Process.Pid)
	}
	return nil
}

func checkLocked(t *testing.T, err error, path string) {
	t.Helper()
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("Open of a held journal: %v, want ErrLocked", err)
	}
	want := "journal " + path + " is locked: another stratum-upgrade is running"
	if err.Error() != want {
		t.Errorf("lock error = %q\nwant %q", err, want)
	}
}

func TestLockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	c := startChild(t, "hold", path)
	if l := c.line(t); l != "ready" {
		t.Fatalf("child said %q", l)
	}
	for _, ro := range []bool{false, true} {
		start := time.Now()
		j, err := Open(path, Options{LockTimeout: 300 * time.Millisecond, ReadOnly: ro})
		if err == nil {
			_ = j.Close()
			t.Fatalf("Open (read-only %v) of a journal another process holds succeeded", ro)
		}
		t.Logf("read-only %v: refused after %v", ro, time.Since(start).Round(time.Millisecond))
		checkLocked(t, err, path)
	}
	// Released when the holder exits.
	must(t, c.stdin.Close())
	if err := c.wait(t); err != nil {
		t.Fatalf("holder: %v", err)
	}
	j := openTest(t, path, Options{LockTimeout: 5 * time.Second})
	if v, err := j.SchemaVersion(); err != nil || v != currentVersion {
		t.Errorf("SchemaVersion() = %d, %v", v, err)
	}
}

func TestLockedInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	j, err := Open(path, Options{})
	must(t, err)
	_, err = Open(path, Options{LockTimeout: 200 * time.Millisecond})
	checkLocked(t, err, path)
	must(t, j.Close())
	openTest(t, path, Options{LockTimeout: 5 * time.Second})
}

// TestAppendSurvivesKill: a process that dies by SIGKILL right after Append
// returned leaves the record in the file, and its lock does not outlive it.
// (This proves Append committed to the file before returning; that the
// commit was fsynced is bbolt's default, NoSync false, which Open keeps.)
func TestAppendSurvivesKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stratum.db")
	c := startChild(t, "crash", path)
	id := c.line(t)
	err := c.wait(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v", err)
	}
	j := openTest(t, path, Options{LockTimeout: 5 * time.Second})
	open, err := j.OpenTxn()
	must(t, err)
	if open == nil || open.ID != id || open.Phase != PhaseApplying {
		t.Fatalf("open txn after the crash = %+v, want %s applying", open, id)
	}
	recs, err := j.Records(id)
	must(t, err)
	if len(recs) != 1 || recs[0].Step != StepMark || recs[0].Stamp != "s1" || recs[0].BootID != "boot-child" {
		t.Errorf("records after the crash = %+v", recs)
	}
}
