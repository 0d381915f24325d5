package proc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// requestTimeout bounds one health request: a component that takes longer
// to answer its local health endpoint does not count as answering.
const requestTimeout = 2 * time.Second

// healthClient makes the health requests. Localhost serving certificates are
// self-signed, so the chain is not verified (the check is of liveness, not
// of identity: the endpoint is on the node's own loopback). No proxy is
// taken from the environment. Keep-alives are off so a connection to a
// process that has since died is never reused and a new process is always
// the one asked. The key exchange is a classical one (X25519, then the NIST
// curves), not the post-quantum hybrid Go prefers by default: a liveness
// probe protects nothing, and the hybrid's ML-KEM makes each handshake
// about a fifth more expensive in CPU.
var healthClient = &http.Client{
	Transport: &http.Transport{
		Proxy:             nil,
		DialContext:       (&net.Dialer{Timeout: requestTimeout}).DialContext,
		TLSClientConfig:   healthTLS,
		DisableKeepAlives: true,
		ForceAttemptHTTP2: false,
	},
	// A redirect is an answer; following it could leave localhost.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// healthTLS is the health requests' TLS configuration (see healthClient).
var healthTLS = &tls.Config{
	InsecureSkipVerify: true,
	CurvePreferences:   []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521},
}

// HasListener reports whether t has a health endpoint Active can ask
// (t.Health is set). A component without one (kube-vip) is active when
// running.
func HasListener(t Target) bool { return t.Health != "" }

// Active reports whether t answers now. With a health endpoint: one GET to
// t.Health returns a 2xx status within a short per-request timeout (2 s, or
// less if ctx ends sooner). Without one: Running. Any failure, an unreadable
// /proc included, is false; WaitActive reports why.
func (s *Scanner) Active(ctx context.Context, t Target) bool {
	return s.answer(ctx, t, nil) == nil
}

// answer is Active with the reason it is false; q, when not nil, is where
// the health request waits.
func (s *Scanner) answer(ctx context.Context, t Target, q *quiet) error {
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
	if err := probe(ctx, q, t.Health); err != nil {
		return describeProbe(t.Health, err)
	}
	return nil
}

// probe makes one health request to url: nil for a 2xx answer, otherwise
// the failure, with an excerpt of the body of a non-2xx answer. It waits
// in q, or in a quiet of its own when q is nil.
func probe(ctx context.Context, q *quiet, url string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health endpoint %q: %w", url, err)
	}
	var resp *http.Response
	ap, direct := directAddr(req.URL)
	if direct && q == nil {
		if q, err = newQuiet(); err == nil {
			defer q.close()
		}
		direct = err == nil
	}
	if direct {
		// The endpoints kubeadm renders (127.0.0.1, an advertise address):
		// on a socket of its own, without http.Client's goroutines.
		dl, _ := ctx.Deadline()
		var release func()
		if resp, release, err = directProbe(ctx, q, req, ap, dl); err != nil {
			return err
		}
		defer release()
	} else if resp, err = healthClient.Do(req); err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	const excerpt = 256
	body, _ := io.ReadAll(io.LimitReader(resp.Body, excerpt+1))
	text := strings.TrimSpace(strings.ToValidUTF8(string(body), "?"))
	if len(body) > excerpt {
		text = strings.ToValidUTF8(text[:min(len(text), excerpt)], "") + "..."
	}
	return &statusError{status: resp.Status, body: text}
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
	// One quiet for the whole wait: its pauses and its probes' waits.
	pause := sleep
	q, err := newQuiet()
	if err == nil {
		defer q.close()
		pause = q.sleep
	}
	return waitFor(ctx, we, timeout, func(ctx context.Context) (bool, error) {
		err := s.answer(ctx, t, q)
		return err == nil, err
	}, activePacer(), pause)
}
