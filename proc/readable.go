package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pollable wraps fd, a descriptor the kernel can poll (a pidfd, the exec
// watch's socket), in an *os.File that owns it and that Go's runtime
// poller watches: a goroutine waiting on it parks, holding no thread,
// until the descriptor is readable or the file's deadline passes. It
// closes fd and returns an error when the poller cannot watch it (the
// caller then sleeps instead of waiting on events).
func pollable(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", name, os.NewSyscallError("fcntl", err))
	}
	// os.NewFile registers a non-blocking descriptor with the poller; if
	// that failed, the file refuses deadlines.
	f := os.NewFile(uintptr(fd), name)
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("watch %s: not watched by the runtime's poller: %w", name, err)
	}
	return f, nil
}

// waitReadable waits until ready reports f's descriptor ready, deadline
// passes or ctx ends, and reports whether it was ready. ready is asked
// first at once, then each time the poller sees the descriptor readable;
// it must not block (nil: readableNow). An error means
// the wait itself failed.
func waitReadable(ctx context.Context, f *os.File, deadline time.Time, ready func(fd int) bool) (bool, error) {
	if ctx.Err() != nil || !time.Now().Before(deadline) {
		return false, nil
	}
	if ready == nil {
		ready = readableNow
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false, fmt.Errorf("wait for %s: %w", f.Name(), err)
	}
	if err := f.SetReadDeadline(deadline); err != nil {
		return false, fmt.Errorf("wait for %s: %w", f.Name(), err)
	}
	// ctx ending moves the deadline to the past, which wakes the wait.
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var ok bool
	err = rc.Read(func(fd uintptr) bool {
		ok = ready(int(fd))
		return ok
	})
	switch {
	case ok:
		return true, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("wait for %s: %w", f.Name(), err)
	}
	return false, nil
}

// readableNow reports whether fd is readable (or hung up, or in error),
// without waiting: poll(2) with a timeout of zero.
func readableNow(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		// A descriptor poll cannot ask is treated as ready: the wait
		// checks again rather than sleeping through an event.
		return err != nil || n > 0
	}
}
