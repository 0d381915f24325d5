package proc

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sleep pauses for d, or until ctx ends, whichever comes first.
//
// It waits on a timer descriptor (timerfd) parked in Go's network poller
// rather than on a runtime timer, for CPU: on Linux the runtime's poller
// waits in whole milliseconds, rounding down, so a runtime timer of 5 ms
// wakes the process at 4 ms and again for the rest, and the runtime's
// monitor thread, asleep until the next timer, wakes for it too. Three
// wakeups for one pause, on a small VM about 0.1 ms of CPU each; the timer
// descriptor expires once, to the nanosecond, and wakes only the thread
// that waits for it. Where no timer descriptor can be had or the poller
// cannot watch it, it sleeps on a runtime timer.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 || ctx.Err() != nil {
		return
	}
	end := time.Now().Add(d)
	f, err := armedTimer(d)
	if err != nil {
		timerSleep(ctx, d)
		return
	}
	defer f.Close()
	// ctx ending moves the read's deadline to the past, which wakes it.
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var expirations [8]byte
	if _, err := f.Read(expirations[:]); err != nil && ctx.Err() == nil && !os.IsTimeout(err) {
		// The descriptor failed (it cannot, short of a kernel bug): the
		// pause still lasts d.
		timerSleep(ctx, time.Until(end))
	}
}

// armedTimer returns a non-blocking timer descriptor that expires once,
// d from now, registered with the runtime's poller.
func armedTimer(d time.Duration) (*os.File, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	// A non-blocking descriptor given to os.NewFile is registered with the
	// poller; a deadline is refused on one it could not register.
	f := os.NewFile(uintptr(fd), "timerfd")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, err
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	if err := unix.TimerfdSettime(fd, 0, &spec, nil); err != nil {
		f.Close()
		return nil, os.NewSyscallError("timerfd_settime", err)
	}
	return f, nil
}

// timerSleep is sleep on a runtime timer.
func timerSleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
