package proc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sys/unix"
)

// Poll pacing shared by every wait: the first check runs at once, then the
// interval starts at firstInterval and doubles up to maxInterval.
const (
	firstInterval = 10 * time.Millisecond
	maxInterval   = 250 * time.Millisecond
)

func newBackOff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     firstInterval,
		RandomizationFactor: 0,
		Multiplier:          2,
		MaxInterval:         maxInterval,
		MaxElapsedTime:      0, // the caller's deadline ends the wait
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	return b
}

// check is one poll of a wait: done, or why not yet.
type check func(ctx context.Context) (done bool, why error)

// pause waits up to d, or until ctx ends. It may return early (a watched
// process exited); the wait then checks again.
type pause func(ctx context.Context, d time.Duration)

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// waitFor runs c until it reports done, ctx ends or timeout passes, pausing
// between checks with p. It returns nil once done; otherwise an error saying
// what was awaited ("waiting for <what>"), for how long, and the last reason
// c gave. The error wraps ctx's error (context.DeadlineExceeded on timeout)
// and that reason. A timeout <= 0 allows a single check.
func waitFor(ctx context.Context, what string, timeout time.Duration, c check, p pause) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, max(timeout, 0))
	defer cancel()
	b := newBackOff()
	var why error
	for {
		done, w := c(ctx)
		if done {
			return nil
		}
		// A check cut short by the deadline says only that; keep the reason
		// the check before it gave.
		if w != nil && (why == nil || ctx.Err() == nil) {
			why = w
		}
		if ctx.Err() != nil {
			break
		}
		p(ctx, b.NextBackOff())
		if ctx.Err() != nil {
			break
		}
	}
	if why == nil {
		why = errors.New("no check completed")
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("waiting for %s: timed out after %s (%w); last failure: %w", what, elapsed, ctx.Err(), why)
	}
	return fmt.Errorf("waiting for %s: stopped after %s (%w); last failure: %w", what, elapsed, ctx.Err(), why)
}

// WaitReplaced waits until Replaced(t, m) is done: once a changed manifest
// is written, until kubelet has taken down whatever ran before it and runs
// at least one process started after m. It returns nil once that holds. On
// timeout (or when ctx ends) the error lists the pids and start ticks that
// still predate m, or says that no process of t.Binary is running, or gives
// the last error reading /proc. Reading errors are retried until the
// deadline: they are unknown, not an answer.
func (s *Scanner) WaitReplaced(ctx context.Context, t Target, m Mark, timeout time.Duration) error {
	what := fmt.Sprintf("%s to be replaced after tick %d of boot %s", t.Name, m.Ticks, m.BootID)
	if m.BootID == "" {
		return fmt.Errorf("waiting for %s: mark has no boot id (take it with Mark)", what)
	}
	return waitFor(ctx, what, timeout, func(context.Context) (bool, error) {
		done, stale, err := s.Replaced(t, m)
		switch {
		case err != nil:
			return false, err
		case done:
			return true, nil
		case len(stale) > 0:
			return false, fmt.Errorf("still running from before the mark: %s", describe(stale))
		default:
			return false, fmt.Errorf("no process of %s is running", t.Binary)
		}
	}, sleep)
}

// WaitGone waits until no process of t.Binary runs (a zombie does not run).
// It returns nil once PIDs reports none. On timeout (or when ctx ends) the
// error lists the survivors' pids and start ticks, or gives the last error
// reading /proc: an unreadable table is retried until the deadline, never
// taken for gone.
//
// Between scans it waits on pidfds of the survivors where the kernel offers
// them (Linux 5.3 and later, and only for the procfs of this process's own
// pid namespace), so an exit is seen at once; otherwise it polls.
func (s *Scanner) WaitGone(ctx context.Context, t Target, timeout time.Duration) error {
	var survivors []Process
	return waitFor(ctx, t.Name+" to exit", timeout, func(context.Context) (bool, error) {
		ps, err := s.PIDs(t.Binary)
		if err != nil {
			survivors = nil
			return false, err
		}
		survivors = ps
		if len(ps) == 0 {
			return true, nil
		}
		return false, fmt.Errorf("still running: %s", describe(ps))
	}, func(ctx context.Context, d time.Duration) {
		if !s.live || len(survivors) == 0 || !s.awaitExit(ctx, survivors, d) {
			sleep(ctx, d)
		}
	})
}

// awaitExit waits up to d (and no longer than ctx allows) for any of ps to
// exit, on pidfds. It reports false when pidfds cannot be used, for the
// caller to fall back to a plain sleep.
func (s *Scanner) awaitExit(ctx context.Context, ps []Process, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 {
		return true
	}
	fds := make([]unix.PollFd, 0, len(ps))
	defer func() {
		for _, f := range fds {
			unix.Close(int(f.Fd))
		}
	}()
	for _, p := range ps {
		fd, err := unix.PidfdOpen(p.PID, 0)
		if errors.Is(err, unix.ESRCH) {
			return true // already gone: scan again at once
		}
		if err != nil {
			return false
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		// The pid may have been reused between the scan and the open: then
		// the process scanned is gone.
		ticks, alive, err := s.StartTicks(p.PID)
		if err != nil || !alive || ticks != p.StartTicks {
			return true
		}
	}
	_, err := unix.Poll(fds, int(d.Milliseconds())+1)
	if err != nil && !errors.Is(err, unix.EINTR) {
		return false
	}
	return true
}

// describe formats processes for an error: "pid 12 (started at tick 345)".
func describe(ps []Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("pid %d (started at tick %d)", p.PID, p.StartTicks)
	}
	return strings.Join(parts, ", ")
}
