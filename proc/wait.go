package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// watchedInterval is the pause between the checks of a WaitReplaced that
// the kernel's exec events wake: those checks are only a safety net for
// what the events do not report (a process of the binary forked without an
// exec, lost events).
const watchedInterval = 2 * time.Second

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

// pacer says how long to pause after a check that failed for why.
type pacer func(why error) time.Duration

// backoffPacer is the default pacing: firstInterval doubling up to
// maxInterval, whatever the failure.
func backoffPacer() pacer {
	b := newBackOff()
	return func(error) time.Duration { return b.NextBackOff() }
}

// pause waits up to d, or until ctx ends. It may return early (a watched
// process exited); the wait then checks again.
type pause func(ctx context.Context, d time.Duration)

// waitFor runs c until it reports done, ctx ends or timeout passes, pausing
// between checks with p for as long as next says. It returns nil once
// done; otherwise we, completed: how long it waited, ctx's error
// (context.DeadlineExceeded on timeout) and the last reason c gave. A
// timeout <= 0 allows a single check.
func waitFor(ctx context.Context, we *WaitError, timeout time.Duration, c check, next pacer, p pause) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, max(timeout, 0))
	defer cancel()
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
		p(ctx, next(w))
		if ctx.Err() != nil {
			break
		}
	}
	we.Timeout, we.Elapsed = max(timeout, 0), time.Since(start).Round(time.Millisecond)
	we.Last, we.cause = why, ctx.Err()
	return we
}

// WaitGone waits until no process of t.Binary runs (a zombie does not run).
// It returns nil once PIDs reports none. On timeout (or when ctx ends) the
// error (a *WaitError) lists the survivors' pids (start ticks in Detail), or gives the last error
// reading /proc: an unreadable table is retried until the deadline, never
// taken for gone.
//
// Between scans it waits on pidfds of the survivors where the kernel offers
// them (Linux 5.3 and later, and only for the procfs of this process's own
// pid namespace), so an exit is seen at once; otherwise it polls.
func (s *Scanner) WaitGone(ctx context.Context, t Target, timeout time.Duration) error {
	var survivors []Process
	we := &WaitError{Component: t.Name, Awaited: t.Name + " to exit", Failed: t.Name + " did not exit", Advice: kubeletLog}
	return waitFor(ctx, we, timeout, func(context.Context) (bool, error) {
		ps, err := s.Of(t)
		if err != nil {
			survivors = nil
			return false, err
		}
		survivors = ps
		if len(ps) == 0 {
			return true, nil
		}
		we.Detail = "still running: " + describe(ps)
		return false, fmt.Errorf("still running: %s", describePIDs(ps))
	}, backoffPacer(), func(ctx context.Context, d time.Duration) {
		s.awaitChange(ctx, d, survivors, nil, "")
	})
}

// woke is why awaitChange returned.
type woke int

const (
	wokeOther woke = iota // d passed, ctx ended, or nothing could be watched
	wokeExit              // one of the watched processes exited
	wokeExec              // the exec watch saw an exec of binary, or lost events
)

// awaitChange pauses a wait for up to d (and no longer than ctx allows)
// and returns early when something happens that may end the wait, or ctx
// ends. Without w: every one of ps has exited (watched on pidfds, on the
// live procfs only). With w (a WaitReplaced, ps its stale processes): once
// every one of ps has exited, w reports the exec of a process whose
// argv[0] base name is binary (or lost events). The exits are awaited in
// turn, as neither wait can end while one of ps runs; a process of binary
// that starts meanwhile is found by the scan after the pause. With nothing
// to watch it sleeps. It returns why it returned.
func (s *Scanner) awaitChange(ctx context.Context, d time.Duration, ps []Process, w *execWatch, binary string) woke {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 || ctx.Err() != nil {
		return wokeOther
	}
	deadline := time.Now().Add(d)
	var exits []*os.File
	defer func() {
		for _, f := range exits {
			f.Close()
		}
	}()
	if s.live {
		for _, p := range ps {
			fd, err := unix.PidfdOpen(p.PID, 0)
			if errors.Is(err, unix.ESRCH) {
				return wokeExit // already gone: check again at once
			}
			if err != nil {
				// No pidfds here (a kernel before 5.3): exits are polled.
				break
			}
			f, err := pollable(fd, fmt.Sprintf("pidfd of pid %d", p.PID))
			if err != nil {
				break
			}
			exits = append(exits, f)
			// The pid may have been reused between the scan and the open:
			// then the process scanned is gone.
			ticks, alive, err := s.StartTicks(p.PID)
			if err != nil || !alive || ticks != p.StartTicks {
				return wokeExit
			}
		}
		if len(exits) < len(ps) {
			for _, f := range exits {
				f.Close()
			}
			exits = nil
		}
	}
	switch {
	case len(exits) == 0 && len(ps) > 0:
		// Exits cannot be watched: poll them at the shared pace at most.
		sleep(ctx, min(d, maxInterval))
		return wokeOther
	case len(exits) == 0 && w == nil:
		sleep(ctx, d)
		return wokeOther
	}
	// A pidfd is readable once its process has exited (a zombie too).
	for _, f := range exits {
		exited, err := waitReadable(ctx, f, deadline, nil)
		if err != nil {
			sleep(ctx, time.Until(deadline))
			return wokeOther
		}
		if !exited {
			return wokeOther
		}
	}
	if w == nil {
		return wokeExit
	}
	// None of ps is left: a process of binary starting is what can end
	// the wait. w reads every pending event each time its socket becomes
	// readable, and is ready once one may matter.
	seen, err := w.wait(ctx, deadline, func() bool { return w.relevant(s, binary) })
	switch {
	case err != nil:
		sleep(ctx, time.Until(deadline))
		return wokeOther
	case seen:
		return wokeExec
	}
	return wokeOther
}

// sleep pauses for d, or until ctx ends, whichever comes first.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 || ctx.Err() != nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// describe formats processes for an error: "pid 12 (started at tick 345)".
func describe(ps []Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("pid %d (started at tick %d)", p.PID, p.StartTicks)
	}
	return strings.Join(parts, ", ")
}
