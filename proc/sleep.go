package proc

import (
	"context"
	"time"
)

// sleep pauses for d, or until ctx ends, whichever comes first.
//
// It waits on a timer descriptor (timerfd) parked in Go's network poller
// (a quiet of its own) rather than on a runtime timer, for CPU: on Linux
// the runtime's poller waits in whole milliseconds, rounding down, so a
// runtime timer of 5 ms wakes the process at 4 ms and again for the rest,
// and the runtime's monitor thread, asleep until the next timer, wakes for
// it too. Three wakeups for one pause, on a small VM about 0.1 ms of CPU
// each; the timer descriptor expires once, to the nanosecond, and wakes
// only the thread that waits for it. Where no timer descriptor can be had
// or the poller cannot watch it, it sleeps on a runtime timer.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 || ctx.Err() != nil {
		return
	}
	q, err := newQuiet()
	if err != nil {
		timerSleep(ctx, d)
		return
	}
	defer q.close()
	q.sleep(ctx, d)
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
