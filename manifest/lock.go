package manifest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ErrLocked is returned by LockDir when another process holds the manifest
// directory's lock.
var ErrLocked = errors.New("manifest directory is locked")

// LockDir takes an exclusive flock on the manifest directory itself (no
// file is created in it), waiting at most timeout. It keeps two writers out
// of one manifest directory even when they use different state directories,
// and so different journals. The kernel drops the lock when the process
// exits; release drops it earlier. A directory that does not exist yet is
// not locked (release is a no-op): the caller is about to create it.
func LockDir(dir string, timeout time.Duration) (release func(), err error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock manifest dir %s: %w", dir, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock manifest dir %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w: %s is held by another stratum-upgrade (perhaps one with another --state-dir) after waiting %s; only one may write the manifest directory", ErrLocked, dir, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
