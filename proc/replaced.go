package proc

import (
	"context"
	"fmt"
	"path"
	"time"
)

// WaitReplaced waits until Replaced(t, m) is done: once a changed manifest
// is written, until kubelet has taken down whatever ran before it and runs
// at least one process started after m. It returns nil once that holds. On
// timeout (or when ctx ends) the error is a *WaitError: "kubelet did not
// start a new <name> within <timeout> of its manifest being written" with
// the pids still running from before m, or that no process of t.Binary is
// running, or the last error reading /proc (m's ticks and boot id and the
// start ticks are in its Detail). Reading errors are retried until the
// deadline: they are unknown, not an answer.
//
// Every decision applies Replaced's rule to the processes of t.Binary. On
// the procfs of this process's own pid namespace, where the kernel's
// process events connector is available (root on the host: CAP_NET_ADMIN
// in the initial namespaces), the wait is driven by events: it subscribes
// to exec events (or takes the subscription Arm kept), scans the whole
// table once (or starts from what Arm's scan found), waits for the processes that
// predate m to exit (on pidfds, Linux 5.3 and later), then for the exec of
// a process whose argv[0] names t.Binary. After such an event it does not
// scan the table again: it reads only the processes the last check found
// and the ones the events named (see tracked). A scan of the whole table
// is repeated every two seconds without an event, and after lost events or
// a failed read. Where the events are not available every check scans the
// table, at once, then after 10 ms doubling up to 250 ms.
func (s *Scanner) WaitReplaced(ctx context.Context, t Target, m Mark, timeout time.Duration) error {
	if m.BootID == "" {
		return fmt.Errorf("waiting for %s to be replaced: mark has no boot id (take it with Mark)", t.Name)
	}
	we := &WaitError{
		Component: t.Name,
		Awaited:   "kubelet to start a new " + t.Name,
		Failed:    "kubelet did not start a new " + t.Name,
		After:     "of its manifest being written",
		Advice:    kubeletLog,
		Detail:    fmt.Sprintf("mark: tick %d of boot %s", m.Ticks, m.BootID),
	}
	// Subscribed before the first check, so that no exec falls between;
	// or, after Arm, before Arm's scan, whose answer the first check then
	// starts from instead of a scan of its own.
	tr := &tracked{s: s, t: t, m: m, full: true}
	if a := s.takeArmed(t.Binary); a != nil {
		tr.w, tr.known, tr.full, tr.sameBoot = a.w, a.known, false, a.bootID == m.BootID
		// The execs since Arm wait in the socket: read them (their pids,
		// or that some were lost) before the first check.
		tr.w.relevant(s, tr.binary())
	} else {
		tr.w = s.watchExecs()
	}
	w := tr.w
	defer w.close()
	var (
		answered bool // the last check read /proc: its failure is an answer
		polled   = backoffPacer()
	)
	next := func(why error) time.Duration {
		if w != nil && answered {
			return watchedInterval
		}
		// Polled, or /proc could not be read: retried at the shared pace.
		return polled(why)
	}
	return waitFor(ctx, we, timeout, func(context.Context) (bool, error) {
		done, st, err := tr.check()
		answered = err == nil
		switch {
		case err != nil:
			return false, err
		case done:
			return true, nil
		case len(st) > 0:
			we.Detail = fmt.Sprintf("mark: tick %d of boot %s; still running from before it: %s", m.Ticks, m.BootID, describe(st))
			return false, fmt.Errorf("still running: %s, started before the write", describePIDs(st))
		default:
			return false, fmt.Errorf("no process of %s is running", t.Binary)
		}
	}, next, func(ctx context.Context, d time.Duration) {
		why := s.awaitChange(ctx, d, tr.stale, w, tr.binary())
		// Only an exit or an exec the watch reported leaves the tracked
		// processes complete; a pause that ran out (the safety net) or
		// anything else rescans the whole table.
		tr.full = tr.full || w == nil || why == wokeOther
	})
}

// tracked is what a WaitReplaced knows of t's processes between checks.
//
// With exec events, the processes of t.Binary change between two checks
// only in ways the wait sees: one exits (it is read again and is gone), a
// process execs t.Binary (the watch names its pid), or a process of
// t.Binary forks (the child starts after the previous check, so after m:
// it can only be a replacement, never stale, and the next scan of the
// whole table finds it). A process that rewrites its argv[0] to t.Binary
// without an exec is seen at the next scan of the whole table, which runs
// every two seconds without events, as it would have been seen at the
// next check before. So after an event a check that reads only the
// processes the last check found plus the ones the events named reaches
// the same answer as a scan of the whole table, at a fraction of the cost.
type tracked struct {
	s *Scanner
	t Target
	m Mark
	w *execWatch
	// full says the next check scans the whole table: the first, after a
	// failed read, lost events or a pause without events.
	full bool
	// known are the processes of t.Binary the last check found, stale
	// those of them that started before m; sameBoot whether m was taken
	// in this boot (read at every scan of the whole table).
	known, stale []Process
	sameBoot     bool
}

func (tr *tracked) binary() string { return path.Base(tr.t.Binary) }

// check is one Replaced check: done when at least one process of t.Binary
// runs and none started before m, and the stale ones otherwise. An error
// means the answer is unknown; the next check then scans the whole table.
func (tr *tracked) check() (done bool, stale []Process, err error) {
	found, lost := tr.w.take()
	var ps []Process
	if tr.full || lost {
		ps, err = tr.s.Of(tr.t)
		if err == nil {
			var id string
			id, err = tr.s.bootID()
			tr.sameBoot = id == tr.m.BootID
		}
	} else {
		pids := make([]int, 0, len(tr.known)+len(found))
		for _, p := range tr.known {
			pids = append(pids, p.PID)
		}
		ps, err = tr.s.among(append(pids, found...), tr.binary())
		if err == nil {
			id, _ := tr.s.split(ps, tr.t.NotPods)
			ps = id.Ours
		}
	}
	if err != nil {
		tr.full = true
		return false, nil, fmt.Errorf("has %s been replaced: %w", tr.t.Name, err)
	}
	tr.full, tr.known, tr.stale = false, ps, nil
	if tr.sameBoot {
		for _, p := range ps {
			if p.StartTicks <= tr.m.Ticks {
				tr.stale = append(tr.stale, p)
			}
		}
	}
	return len(ps) > 0 && len(tr.stale) == 0, tr.stale, nil
}
