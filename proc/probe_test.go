package proc

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The health request on a socket of its own (directProbe) for endpoints
// whose host is an IP literal; other hosts go through http.Client.

func TestDirectAddr(t *testing.T) {
	for raw, want := range map[string]string{
		"https://127.0.0.1:10259/healthz": "127.0.0.1:10259",
		"http://127.0.0.1:2381/health":    "127.0.0.1:2381",
		"https://[::1]:6443/livez":        "[::1]:6443",
		"https://10.0.0.5/readyz":         "10.0.0.5:443",
		"http://10.0.0.5/readyz":          "10.0.0.5:80",
		"https://localhost:10259/healthz": "", // a name: http.Client resolves it
		"https://[fe80::1%25eth0]:6443/":  "", // a zone
		"ftp://127.0.0.1/x":               "",
		"https://u:p@127.0.0.1:1/":        "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		ap, ok := directAddr(u)
		got := ""
		if ok {
			got = ap.String()
		}
		if got != want {
			t.Errorf("directAddr(%s) = %q, want %q", raw, got, want)
		}
	}
}

// TestProbeRefused: nothing listening is a refused connection (which
// WaitActive paces apart), in the operator's words.
func TestProbeRefused(t *testing.T) {
	u := closedURL(t)
	err := probe(context.Background(), nil, u)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("probe of a closed port: %v, want ECONNREFUSED", err)
	}
	host := strings.TrimPrefix(strings.TrimSuffix(u, "/healthz"), "http://")
	if got := describeProbe(u, err).Error(); got != "nothing listens on "+host {
		t.Fatalf("described as %q", got)
	}
}

// TestProbeCancelled: a request the server never answers ends as soon as
// ctx is cancelled, long before the per-request timeout.
func TestProbeCancelled(t *testing.T) {
	for _, tls := range []bool{false, true} {
		release := make(chan struct{})
		s := server(t, tls, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		start := time.Now()
		err := probe(ctx, nil, s.URL+"/healthz")
		close(release)
		if took := time.Since(start); took > requestTimeout/2 {
			t.Errorf("tls %v: the cancelled probe took %s", tls, took)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("tls %v: cancelled probe: %v, want context.Canceled", tls, err)
		}
	}
}

// TestProbeByName: an endpoint named by a host name still works, through
// http.Client.
func TestProbeByName(t *testing.T) {
	s := server(t, true, status(200, "ok"))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "https://"))
	if _, err := net.LookupHost("localhost"); err != nil {
		t.Skipf("localhost does not resolve here: %v", err)
	}
	if err := probe(context.Background(), nil, "https://localhost:"+port+"/healthz"); err != nil {
		t.Fatalf("probe by name: %v", err)
	}
}

// TestProbeIPv6: the socket of its own speaks IPv6 too.
func TestProbeIPv6(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	srv := &http.Server{Handler: status(204, "")}
	go srv.Serve(l)
	defer srv.Close()
	if err := probe(context.Background(), nil, "http://"+l.Addr().String()+"/livez"); err != nil {
		t.Fatalf("probe over IPv6: %v", err)
	}
}

// silentListener accepts connections and never writes to them: a TLS
// handshake or a request on it waits until its deadline or ctx ends.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return l.Addr().String()
}

// TestDirectProbeDeadline: a peer that never answers (the handshake for
// https, the answer for http) fails the probe at its deadline with a
// net.Error whose Timeout is true, not at the per-request timeout.
func TestDirectProbeDeadline(t *testing.T) {
	addr := silentListener(t)
	for _, scheme := range []string{"http", "https"} {
		req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		ap, ok := directAddr(req.URL)
		if !ok {
			t.Fatalf("%s: not a direct address", req.URL)
		}
		start := time.Now()
		resp, release, err := directProbe(context.Background(), testQuiet(t), req, ap, start.Add(150*time.Millisecond))
		took := time.Since(start)
		if err == nil {
			resp.Body.Close()
			release()
			t.Fatalf("%s: a silent peer answered", scheme)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("%s: error %v is not a timeout", scheme, err)
		}
		if took < 140*time.Millisecond || took > requestTimeout/2 {
			t.Errorf("%s: the probe with a 150ms deadline took %s", scheme, took)
		}
	}
}

// TestDirectProbeCancelledWhileSilent: ctx ending wakes a probe waiting for
// a silent peer at once, with ctx's error, long before its deadline.
func TestDirectProbeCancelledWhileSilent(t *testing.T) {
	addr := silentListener(t)
	for _, scheme := range []string{"http", "https"} {
		req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		ap, _ := directAddr(req.URL)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, _, err = directProbe(ctx, testQuiet(t), req, ap, start.Add(time.Minute))
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: the cancelled probe took %s", scheme, took)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: cancelled probe: %v, want context.Canceled", scheme, err)
		}
		cancel()
	}
}

// testQuiet is a quiet released when the test ends.
func testQuiet(t *testing.T) *quiet {
	t.Helper()
	q, err := newQuiet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.close)
	return q
}
