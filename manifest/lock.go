package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/gofrs/flock"
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
	// Read-only and without O_CREATE: a directory cannot be opened for
	// writing, and a missing one must not be created as a file.
	l := flock.New(dir, flock.SetFlag(os.O_RDONLY))
	// One attempt even when timeout is not positive, then retries until it
	// runs out (TryLockContext gives up at once on an expired context).
	ok, err := l.TryLock()
	if !ok && err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		ok, err = l.TryLockContext(ctx, 20*time.Millisecond)
	}
	switch {
	case ok:
		return func() { _ = l.Unlock() }, nil
	case errors.Is(err, fs.ErrNotExist):
		return func() {}, nil
	case err == nil || errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: %s is held by another stratum-upgrade (perhaps one with another --state-dir) after waiting %s; only one may write the manifest directory", ErrLocked, dir, timeout)
	}
	return nil, dirErr(dir, "cannot lock it", err)
}
