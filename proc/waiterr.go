package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// kubeletLog is where to look when kubelet did not act on a manifest.
const kubeletLog = "check kubelet's log (journalctl -u kubelet)"

// WaitError is a wait that ended before what it waited for happened: at its
// deadline (it wraps context.DeadlineExceeded) or when its context ended
// (it wraps ctx.Err()). It also wraps the last reason a check gave. Its
// message says in the operator's terms what did not happen, within which
// time, what was seen last and where to look; the marks' clock ticks and
// boot ids and the processes' start ticks, which only a developer reads,
// are in Detail (the engine logs it at debug level; the journal holds the
// marks).
type WaitError struct {
	// Component is the component waited for.
	Component string
	// Awaited is what was waited for: "kubelet to start a new
	// kube-apiserver".
	Awaited string
	// Failed says it did not happen: "kubelet did not start a new
	// kube-apiserver".
	Failed string
	// After, if set, says from when the timeout counts: "of its manifest
	// being written".
	After string
	// Timeout is the wait's deadline; Elapsed how long it waited.
	Timeout, Elapsed time.Duration
	// Last is the last reason the awaited thing did not hold.
	Last error
	// Advice says where to look: "check kubelet's log (journalctl -u
	// kubelet)".
	Advice string
	// Detail is for the debug log: the mark and the processes' start ticks.
	Detail string
	cause  error
}

func (e *WaitError) Error() string {
	last := "nothing was checked"
	if e.Last != nil {
		last = e.Last.Error()
	}
	if !errors.Is(e.cause, context.DeadlineExceeded) {
		return fmt.Sprintf("stopped waiting for %s after %s (last seen: %s)", e.Awaited, e.Elapsed, last)
	}
	after := ""
	if e.After != "" {
		after = " " + e.After
	}
	msg := fmt.Sprintf("%s within %s%s (%s)", e.Failed, e.Timeout, after, last)
	if e.Advice != "" {
		msg += "; " + e.Advice
	}
	return msg
}

// Unwrap makes errors.Is hold for the context's error (DeadlineExceeded,
// Canceled) and for the last reason.
func (e *WaitError) Unwrap() []error {
	out := []error{e.cause}
	if e.Last != nil {
		out = append(out, e.Last)
	}
	return out
}

// reason is a check's failure in the operator's terms that still wraps the
// error it describes (errors.Is(err, syscall.ECONNREFUSED) holds).
type reason struct {
	msg string
	err error
}

func (r *reason) Error() string { return r.msg }
func (r *reason) Unwrap() error { return r.err }

// describeProbe is a failed health request in the operator's terms:
// "nothing listens on 127.0.0.1:10259", "no answer from ...", or the HTTP
// status and an excerpt of the body.
func describeProbe(health string, err error) error {
	var se *statusError
	if errors.As(err, &se) {
		return err
	}
	host := health
	if u, perr := url.Parse(health); perr == nil && u.Host != "" {
		host = u.Host
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &reason{"nothing listens on " + host, err}
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return &reason{"no answer from " + host, err}
	case errors.Is(err, syscall.ECONNRESET):
		return &reason{host + " closed the connection", err}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// "Get \"https://...\": remote error: tls: ..." without Go's
		// operation prefix.
		return &reason{strings.TrimSpace(ue.Err.Error()), err}
	}
	return err
}

// statusError is a health endpoint's non-2xx answer.
type statusError struct {
	status string
	body   string
}

func (e *statusError) Error() string {
	if e.body == "" {
		return "last answer: HTTP " + e.status
	}
	return fmt.Sprintf("last answer: HTTP %s: %q", e.status, e.body)
}

// describePIDs lists processes for an operator: "pid 12" or "pids 12, 13".
func describePIDs(ps []Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprint(p.PID)
	}
	if len(ps) == 1 {
		return "pid " + parts[0]
	}
	return "pids " + strings.Join(parts, ", ")
}
