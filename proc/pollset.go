package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pollSet waits until one of a set of descriptors is readable, parked in
// Go's network poller rather than blocked in a poll(2) system call.
//
// Why: a goroutine blocked in a system call keeps its OS thread, and the
// runtime's monitor wakes up every few milliseconds meanwhile to hand the
// goroutine's processor to another thread; a wait of a hundred
// milliseconds paid for tens of those wakeups. The set is an epoll
// instance of its own, which the runtime's poller watches like a socket:
// it is readable while one of its descriptors is.
type pollSet struct {
	f  *os.File
	rc syscall.RawConn
	ev []unix.EpollEvent
}

// newPollSet returns an empty set, or an error when the runtime's poller
// cannot watch it (the caller then sleeps instead of waiting on events).
func newPollSet() (*pollSet, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("poll set: %w", os.NewSyscallError("epoll_create1", err))
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("poll set: %w", os.NewSyscallError("fcntl", err))
	}
	// A non-blocking descriptor is registered with the runtime's poller;
	// if that failed, deadlines are refused and the set is of no use.
	f := os.NewFile(uintptr(fd), "pollset")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("poll set: not watched by the runtime's poller: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("poll set: %w", err)
	}
	return &pollSet{f: f, rc: rc, ev: make([]unix.EpollEvent, 8)}, nil
}

// add watches fd for readability; wait reports it as key.
func (p *pollSet) add(fd int, key int32) error { return p.watch(fd, key, unix.EPOLLIN) }

// watch watches fd for events (EPOLLIN, EPOLLOUT, ...); wait reports it
// as key.
func (p *pollSet) watch(fd int, key int32, events uint32) error {
	var err error
	cerr := p.rc.Control(func(ep uintptr) {
		err = unix.EpollCtl(int(ep), unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: key})
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("poll set: watch descriptor %d: %w", fd, os.NewSyscallError("epoll_ctl", err))
	}
	return nil
}

// remove stops watching fd.
func (p *pollSet) remove(fd int) error {
	var err error
	cerr := p.rc.Control(func(ep uintptr) {
		err = unix.EpollCtl(int(ep), unix.EPOLL_CTL_DEL, fd, nil)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("poll set: stop watching descriptor %d: %w", fd, os.NewSyscallError("epoll_ctl", err))
	}
	return nil
}

// wait returns the keys of the descriptors that are readable, once at
// least one is; it returns none when deadline passes or ctx ends first
// (nil error), and an error only when the set cannot be waited on. The
// keys share one buffer: valid until the next wait.
func (p *pollSet) wait(ctx context.Context, deadline time.Time) ([]int32, error) {
	if err := p.f.SetReadDeadline(deadline); err != nil {
		return nil, fmt.Errorf("poll set: %w", err)
	}
	// ctx ending moves the deadline to the past, which wakes the wait.
	stop := context.AfterFunc(ctx, func() { _ = p.f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var (
		n    int
		werr error
	)
	err := p.rc.Read(func(ep uintptr) bool {
		for {
			n, werr = rawEpollPoll(int(ep), p.ev)
			if !errors.Is(werr, unix.EINTR) {
				break
			}
		}
		return werr != nil || n > 0
	})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("poll set: %w", err)
	case werr != nil:
		return nil, fmt.Errorf("poll set: %w", os.NewSyscallError("epoll_wait", werr))
	}
	keys := make([]int32, n)
	for i := range n {
		keys[i] = p.ev[i].Fd
	}
	return keys, nil
}

// rawEpollPoll is epoll_pwait with a timeout of zero: it never blocks, so
// it is made raw (see quiet).
func rawEpollPoll(ep int, ev []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&ev[0])), uintptr(len(ev)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// close releases the set; its descriptors stay open.
func (p *pollSet) close() {
	p.f.Close()
}
