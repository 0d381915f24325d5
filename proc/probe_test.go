package proc

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProbeRefused: nothing listening is a refused connection (which
// WaitActive paces apart), in the operator's words.
func TestProbeRefused(t *testing.T) {
	u := closedURL(t)
	err := probe(context.Background(), u)
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
		err := probe(ctx, s.URL+"/healthz")
		close(release)
		if took := time.Since(start); took > requestTimeout/2 {
			t.Errorf("tls %v: the cancelled probe took %s", tls, took)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("tls %v: cancelled probe: %v, want context.Canceled", tls, err)
		}
	}
}

// TestProbeByName: an endpoint named by a host name works too.
func TestProbeByName(t *testing.T) {
	s := server(t, true, status(200, "ok"))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "https://"))
	if _, err := net.LookupHost("localhost"); err != nil {
		t.Skipf("localhost does not resolve here: %v", err)
	}
	if err := probe(context.Background(), "https://localhost:"+port+"/healthz"); err != nil {
		t.Fatalf("probe by name: %v", err)
	}
}

// TestProbeIPv6: an endpoint on an IPv6 address (kube-apiserver advertised
// on one) is probed as an IPv4 one.
func TestProbeIPv6(t *testing.T) {
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	srv := &http.Server{Handler: status(204, "")}
	go srv.Serve(l)
	defer srv.Close()
	if err := probe(context.Background(), "http://"+l.Addr().String()+"/livez"); err != nil {
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

// TestProbeDeadline: a peer that never answers (the handshake for https,
// the answer for http) fails the probe when ctx's deadline passes, as a
// timeout (a net.Error whose Timeout is true: "no answer from"), not at the
// per-request timeout.
func TestProbeDeadline(t *testing.T) {
	addr := silentListener(t)
	for _, scheme := range []string{"http", "https"} {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		start := time.Now()
		err := probe(ctx, scheme+"://"+addr+"/healthz")
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("%s: a silent peer answered", scheme)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("%s: error %v is not a timeout", scheme, err)
		}
		if got := describeProbe(scheme+"://"+addr, err).Error(); got != "no answer from "+addr {
			t.Errorf("%s: described as %q", scheme, got)
		}
		if took < 140*time.Millisecond || took > requestTimeout/2 {
			t.Errorf("%s: the probe with a 150ms deadline took %s", scheme, took)
		}
	}
}

// TestProbeRequestTimeout: without a deadline of the caller's, a peer that
// never answers fails the probe after requestTimeout (2 s), as a timeout.
func TestProbeRequestTimeout(t *testing.T) {
	addr := silentListener(t)
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := probe(context.Background(), scheme+"://"+addr+"/healthz")
			took := time.Since(start)
			var ne net.Error
			if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("probe of a silent peer: %v, want a timeout", err)
			}
			if took < requestTimeout-50*time.Millisecond || took > requestTimeout+3*time.Second {
				t.Errorf("the probe took %s, want about %s", took, requestTimeout)
			}
		})
	}
}

// TestProbeCancelledWhileSilent: ctx ending wakes a probe waiting for a
// silent peer at once, with ctx's error, long before its deadline.
func TestProbeCancelledWhileSilent(t *testing.T) {
	addr := silentListener(t)
	for _, scheme := range []string{"http", "https"} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := probe(ctx, scheme+"://"+addr+"/healthz")
		if took := time.Since(start); took > requestTimeout/2 {
			t.Errorf("%s: the cancelled probe took %s", scheme, took)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: cancelled probe: %v, want context.Canceled", scheme, err)
		}
		cancel()
	}
}

// TestProbeLeavesNothingOpen: a probe keeps no connection between probes
// and leaves no goroutine behind, whatever its outcome: after a hundred
// probes (2xx and 500 answers, TLS, a refusal, one ended by its deadline
// while the server was silent) this process has no more descriptors and
// goroutines than before them.
func TestProbeLeavesNothingOpen(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	urls := []string{
		server(t, false, status(200, "ok")).URL + "/healthz",
		server(t, true, status(200, "ok")).URL + "/livez",
		server(t, false, status(500, "not yet")).URL,
		closedURL(t),
		server(t, true, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}).URL,
	}
	round := func() {
		for _, u := range urls {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_ = probe(ctx, u)
			cancel()
		}
	}
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	for range 20 {
		round()
	}
	// The servers close their ends once the client has: allow them a moment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		f, g := openFDs(t), runtime.NumGoroutine()
		if f <= fds && g <= goroutines {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 100 probes: %d descriptors open (%d before), %d goroutines (%d before)", f, fds, g, goroutines)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openFDs is how many descriptors this process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
