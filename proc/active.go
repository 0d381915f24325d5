package proc

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// HasListener reports whether t has a health endpoint Active can ask
// (t.Health is set). A component without one (kube-vip) is active when
// running.
func HasListener(t Target) bool { return t.Health != "" }

// Active reports whether t answers now. With a health endpoint: one GET to
// t.Health returns a 2xx status within a short per-request timeout (2 s, or
// less if ctx ends sooner). Without one: Running. Any failure, an unreadable
// /proc included, is false; WaitActive reports why.
func (s *Scanner) Active(ctx context.Context, t Target) bool {
	return s.answer(ctx, t) == nil
}

// answer is Active with the reason it is false.
func (s *Scanner) answer(ctx context.Context, t Target) error {
	if !HasListener(t) {
		ok, err := s.Running(t)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no process of %s is running", t.Binary)
		}
		return nil
	}
	if err := probe(ctx, t.Health); err != nil {
		return describeProbe(t.Health, err)
	}
	return nil
}

// Pacing of WaitActive while nothing listens on the health endpoint: a
// refused connection reaches no component and costs little, so refusals
// are retried after refusedFirst growing by refusedGrowth up to
// maxInterval, which sees a new process within half the time it took to
// open its listener plus refusedFirst (the shared backoff doubles: up to
// the whole time). What a retry costs is mostly the wakeup (about 0.1 ms
// of CPU on a small VM, the refused connect a fifth of that), so the
// pacing is a number of wakeups: four until a process that listens 25 ms
// after its exec is seen, where 2 ms growing by 30% took six. Any other
// failure (an answer that is not 2xx, a TLS or timeout error) backs off as
// every wait does.
const (
	refusedFirst  = 5 * time.Millisecond
	refusedGrowth = 1.5
)

// activePacer paces WaitActive: the refusal backoff after a refused
// connection, the shared backoff after any other failure; each starts
// over when the kind of failure changes.
func activePacer() pacer {
	other := newBackOff()
	refused := &backoff.ExponentialBackOff{
		InitialInterval: refusedFirst, RandomizationFactor: 0, Multiplier: refusedGrowth,
		MaxInterval: maxInterval, Stop: backoff.Stop, Clock: backoff.SystemClock,
	}
	refused.Reset()
	last := false
	return func(why error) time.Duration {
		r := errors.Is(why, syscall.ECONNREFUSED)
		if r != last {
			other.Reset()
			refused.Reset()
			last = r
		}
		if r {
			return refused.NextBackOff()
		}
		return other.NextBackOff()
	}
}

// WaitActive polls Active until it holds, or timeout passes or ctx ends:
// the first check at once; then, while nothing listens on the endpoint
// (connection refused), after 5 ms growing by 50% a time; after any other
// failure after 10 ms doubling; both up to 250 ms. It
// returns nil once t answers. Otherwise the error is a *WaitError: "<name>
// did not answer healthy on <url> within <timeout>" (or, without a health
// endpoint, "did not start running") with the last failure: nothing
// listening, no answer, or the HTTP status with an excerpt of the body.
func (s *Scanner) WaitActive(ctx context.Context, t Target, timeout time.Duration) error {
	we := &WaitError{
		Component: t.Name,
		Awaited:   fmt.Sprintf("%s to answer on %s", t.Name, t.Health),
		Failed:    fmt.Sprintf("%s did not answer healthy on %s", t.Name, t.Health),
		Advice:    fmt.Sprintf("check its log (crictl ps -a --name %s, then crictl logs ID)", t.Name),
	}
	if !HasListener(t) {
		// No health endpoint (kube-vip): running is all there is to see.
		we.Awaited, we.Failed, we.Advice = t.Name+" to run", t.Name+" did not start running", kubeletLog
	}
	return waitFor(ctx, we, timeout, func(ctx context.Context) (bool, error) {
		err := s.answer(ctx, t)
		return err == nil, err
	}, activePacer(), sleep)
}
