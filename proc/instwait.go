package proc

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInstanceGone is wrapped by WaitInstanceActive's error when no process
// of the awaited pod runs: the instance exited (or never started), which
// no further wait can change until kubelet starts it again.
var ErrInstanceGone = errors.New("instance is gone")

// ErrNoPodCgroups is wrapped by WaitInstanceActive's error where kubelet's
// pod cgroups are not in use: the instances of a component cannot be told
// apart, so none can be awaited alone (and a surge must not be attempted).
var ErrNoPodCgroups = errors.New("pod cgroups are not in use: instances cannot be told apart")

// instancePacer paces WaitInstanceActive: after an answer another
// instance gave, a backoff of its own from firstInterval doubling up to
// maxInterval, for the whole wait (a retry comes promptly at first, a new
// connection hashing afresh; a pod that does not listen or answer for long
// is asked about four times a second, as WaitActive asks, so the wait
// costs well under 1% of a core); after any other failure, WaitActive's
// pacing. It never starts over: starting over whenever the pod's own
// instance failed made a sick surge copy beside a healthy old instance
// cost 1.25% of a core.
func instancePacer() pacer {
	own, other := activePacer(), newBackOff()
	return func(why error) time.Duration {
		if errors.Is(why, errOtherInstance) {
			return other.NextBackOff()
		}
		return own(why)
	}
}

// WaitInstanceActive waits until t.Health answers 2xx on a connection that
// a process of static pod uid accepted: with a surge, two instances listen
// on t's port (SO_REUSEPORT) and an answer from the other one says nothing
// about uid's. Each attempt opens a new connection, makes one request and,
// with the connection open, finds which process holds its server socket
// (answeredBy); an answer from another instance is not a failure and is
// retried promptly, any other failure paces as WaitActive does
// (instancePacer). The pod's processes are found with Instances (t.NotPods
// honoured) and read again at every attempt (podWatch).
//
// It returns nil once uid's instance answers 2xx, and at once with
// ErrNoPodCgroups when pod cgroups are not in use. A pod none of whose
// processes runs is waited for like one that does not answer (kubelet
// restarts a container that exited in the same pod); if that lasts to the
// deadline, the last failure wraps ErrInstanceGone. On timeout (or when ctx
// ends) the error is a *WaitError naming the component, the pod, how many
// answers came from other instances and the last failure of uid's own
// (an unreadable /proc is retried until then, as every wait does).
func (s *Scanner) WaitInstanceActive(ctx context.Context, t Target, uid string, timeout time.Duration) error {
	if !HasListener(t) {
		return fmt.Errorf("waiting for %s of pod %s: it has no health endpoint to ask", t.Name, uid)
	}
	we := &WaitError{
		Component: t.Name,
		Awaited:   fmt.Sprintf("%s of pod %s to answer on %s", t.Name, uid, t.Health),
		Failed:    fmt.Sprintf("%s of pod %s did not answer healthy on %s", t.Name, uid, t.Health),
		Advice:    fmt.Sprintf("check its log (crictl ps -a --name %s, then crictl logs ID)", t.Name),
	}
	var (
		stop            error // the wait cannot succeed: return it
		answers, others int
		own             error // the last failure that was not another instance's answer
	)
	pod := &podWatch{s: s, t: t, uid: uid}
	check := func(ctx context.Context) (bool, error) {
		ps, byPod, err := pod.processes()
		switch {
		case err != nil:
			return false, err
		case !byPod:
			stop = fmt.Errorf("waiting for %s of pod %s: %w", t.Name, uid, ErrNoPodCgroups)
			return true, nil
		case len(ps) == 0:
			// Exited, perhaps to be restarted by kubelet in the same pod
			// (a crash loop): waited out to the deadline, as WaitActive
			// waits out a component that is not answering yet.
			own = fmt.Errorf("no process of %s runs in pod %s: %w", t.Name, uid, ErrInstanceGone)
			return false, own
		}
		ours, err := s.answeredBy(ctx, t.Health, pidsOf(ps))
		if ours || errors.Is(err, errOtherInstance) {
			answers++
		}
		switch {
		case errors.Is(err, errOtherInstance):
			others++
			return false, err
		case err != nil:
			// As waitFor does: a check the deadline cut short keeps the
			// reason the one before gave.
			if own == nil || ctx.Err() == nil {
				own = describeProbe(t.Health, err)
			}
			return false, own
		}
		return true, nil
	}
	err := waitFor(ctx, we, timeout, check, instancePacer(), sleep)
	if stop != nil {
		return stop
	}
	if err != nil {
		we.Last = instanceReason(own, we.Last, answers, others)
	}
	return err
}

// instanceReason is the last failure of a WaitInstanceActive for its
// WaitError: uid's own last failure (else the last reason the check gave)
// with how many answers came from other instances.
func instanceReason(own, last error, answers, others int) error {
	if own == nil {
		own = last
	}
	count := fmt.Sprintf("%d of %d answers came from other instances", others, answers)
	if own == nil || errors.Is(own, errOtherInstance) {
		if own == nil {
			own = errOtherInstance
		}
		return &reason{"no answer came from the pod's instance; " + count, own}
	}
	return &reason{own.Error() + "; " + count, own}
}

// podWatch is the processes of one pod through a WaitInstanceActive. The
// whole table is scanned (Instances) at the first attempt, again once one
// of the known processes is gone, and at least every watchedInterval
// otherwise; in between, each known process's start ticks are read to
// see it is still the same. A component's pod runs one process for its
// life, a restarted container a new one, so what the scans in between
// would add is a forked child, which no listener of ours is.
type podWatch struct {
	s       *Scanner
	t       Target
	uid     string
	known   []Process
	scanned time.Time
}

func (w *podWatch) processes() ([]Process, bool, error) {
	if len(w.known) > 0 && time.Since(w.scanned) < watchedInterval {
		stale := false
		for _, p := range w.known {
			if err := w.s.same(p); errors.Is(err, ErrProcessGone) {
				stale = true
				break
			} else if err != nil {
				return nil, true, err
			}
		}
		if !stale {
			return w.known, true, nil
		}
	}
	ps, byPod, err := w.s.podProcesses(w.t, w.uid)
	if err != nil {
		return nil, byPod, err
	}
	w.known, w.scanned = ps, time.Now()
	return ps, byPod, nil
}
