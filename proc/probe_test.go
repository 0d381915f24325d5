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

// TestProbeByName: an endpoint named by a host name still works, through
// http.Client.
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

// TestProbeIPv6: the socket of its own speaks IPv6 too.
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
