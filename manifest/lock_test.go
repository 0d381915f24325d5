package manifest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A zero timeout still makes one attempt: it takes a free directory and
// refuses a held one at once, with ErrLocked naming the directory.
func TestLockDirZeroTimeout(t *testing.T) {
	dir := t.TempDir()
	release, err := LockDir(dir, 0)
	if err != nil {
		t.Fatalf("lock of a free dir with timeout 0: %v", err)
	}
	start := time.Now()
	_, err = LockDir(dir, 0)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "after waiting 0s") {
		t.Fatalf("second lock: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusal with timeout 0 took %s", d)
	}
	release()
	release() // a second release is harmless
}

// The lock waits for a holder that lets go within the timeout.
func TestLockDirWaits(t *testing.T) {
	dir := t.TempDir()
	release, err := LockDir(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, release)
	release2, err := LockDir(dir, 5*time.Second)
	if err != nil {
		t.Fatalf("lock after the holder released: %v", err)
	}
	release2()
}

// A missing directory is not created, not as a file either.
func TestLockDirMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	release, err := LockDir(missing, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := os.Lstat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LockDir created %s: %v", missing, err)
	}
}

const lockHelperEnv = "STRATUM_TEST_LOCKDIR_HELPER"

// The kernel drops the lock when the holder exits without releasing it.
func TestLockDirDroppedAtExit(t *testing.T) {
	if dir := os.Getenv(lockHelperEnv); dir != "" {
		if _, err := LockDir(dir, time.Second); err != nil {
			os.Exit(3)
		}
		os.Exit(0) // exits holding the lock
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockDirDroppedAtExit$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	release, err := LockDir(dir, 0)
	if err != nil {
		t.Fatalf("lock after the holder exited: %v", err)
	}
	release()
}
