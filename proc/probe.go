package proc

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// requestTimeout bounds one health request: a component that takes longer
// to answer its local health endpoint does not count as answering.
const requestTimeout = 2 * time.Second

// drainLimit is how much of an answer's body a probe reads before it
// closes the connection: closing a socket with unread data resets the
// connection, which the component may log; a health answer is a few bytes.
const drainLimit = 64 << 10

// healthClient makes the health requests, one connection per request.
// Localhost serving certificates are self-signed, so the chain is not
// verified (the check is of liveness, not of identity: the endpoint is on
// the node's own loopback). No proxy is taken from the environment.
// Keep-alives are off: the request asks the server to close, the
// connection is closed once the answer is read, so a connection to a
// process that has since died is never reused, a new process is always the
// one asked and nothing stays open between probes. HTTP/1.1 only, as a
// component's health endpoint speaks it.
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
// The key exchange is a classical one (X25519, then the NIST curves), not
// the post-quantum hybrid Go prefers by default: a liveness probe protects
// nothing, and the hybrid's ML-KEM makes each handshake about a fifth more
// expensive in CPU. X25519 first: Go's TLS server (every component's)
// prefers it, and a client offering another curve first gets one more
// round trip.
var healthTLS = &tls.Config{
	InsecureSkipVerify: true,
	CurvePreferences:   []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521},
}

// probe makes one health request to url, bounded by requestTimeout and
// ended by ctx: nil for a 2xx answer, otherwise the failure, with an
// excerpt of the body of a non-2xx answer. A connection refused wraps
// syscall.ECONNREFUSED; a request that ran out of time is a net.Error
// whose Timeout is true (or ctx's error, when ctx ended first).
func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health endpoint %q: %w", url, err)
	}
	resp, err := healthClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return judge(resp)
}

// judge reads resp's body (up to drainLimit) and returns nil for a 2xx
// answer, otherwise a *statusError with an excerpt of the body.
func judge(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		return nil
	}
	const excerpt = 256
	body, _ := io.ReadAll(io.LimitReader(resp.Body, excerpt+1))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	text := strings.TrimSpace(strings.ToValidUTF8(string(body), "?"))
	if len(body) > excerpt {
		text = strings.ToValidUTF8(text[:min(len(text), excerpt)], "") + "..."
	}
	return &statusError{status: resp.Status, body: text}
}
