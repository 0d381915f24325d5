package testbed

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The inner tests run in a child test binary; the outer ones check that
// the child's node left no process behind.
const innerRootEnv = "TESTBED_INNER_ROOT"

func TestInnerFailingNode(t *testing.T) {
	root := os.Getenv(innerRootEnv)
	if root == "" {
		t.Skip("run by TestTeardownAfterFailure")
	}
	Start(t, Options{Root: root, StateFile: "testdata/states/default-vip.yaml"})
	t.Fatal("failing on purpose with a node up")
}

func TestInnerKilledNode(t *testing.T) {
	root := os.Getenv(innerRootEnv)
	if root == "" {
		t.Skip("run by TestTeardownAfterKill")
	}
	Start(t, Options{Root: root})
	if err := os.WriteFile(filepath.Join(root, "up"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute) // SIGKILLed by the outer test before this ends
}

func runInner(t *testing.T, name string) (*exec.Cmd, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "node")
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), innerRootEnv+"="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Cleanup(func() {
		// Whatever happened, nothing of the inner node may outlive us.
		if pids, _ := markedProcesses(root); len(pids) > 0 {
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	return cmd, root
}

func waitNoMarked(t *testing.T, root string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pids, err := markedProcesses(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the inner node still alive after %s: %v", timeout, pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTeardownAfterFailure(t *testing.T) {
	cmd, root := runInner(t, "TestInnerFailingNode")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("inner test passed; it must fail:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "kubelet.log")); err != nil {
		t.Fatalf("inner node never started: %v\n%s", err, out)
	}
	// Cleanup ran in the failed test: nothing is left, at once.
	waitNoMarked(t, root, time.Second)
}

func TestTeardownAfterKill(t *testing.T) {
	cmd, root := runInner(t, "TestInnerKilledNode")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(root, "up")); err == nil {
			break
		}
		select {
		case <-done:
			t.Fatal("inner test exited before its node was up")
		default:
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Fatal("inner node not up within 2m")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pids, _ := markedProcesses(root); len(pids) < 5 {
		t.Fatalf("inner node runs %d marked processes, want the stand-in and four pods", len(pids))
	}
	// SIGKILL: no cleanup runs. Pdeathsig takes the stand-in down with the
	// test binary, and the stand-in's pods with it.
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-done
	waitNoMarked(t, root, 10*time.Second)
}
