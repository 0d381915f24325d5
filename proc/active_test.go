package proc

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// closedURL returns a loopback URL nothing listens on: a free port, closed.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/healthz"
}

func server(t *testing.T, tls bool, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func TestActive(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		label string
		url   func(t *testing.T) string
		want  bool
	}{
		{"200", func(t *testing.T) string { return server(t, false, status(200, "ok")).URL + "/healthz" }, true},
		{"204", func(t *testing.T) string { return server(t, false, status(204, "")).URL }, true},
		{"500", func(t *testing.T) string { return server(t, false, status(500, "etcd failed")).URL }, false},
		{"404", func(t *testing.T) string { return server(t, false, status(404, "")).URL }, false},
		{"redirect is not followed", func(t *testing.T) string {
			ok := server(t, false, status(200, "ok"))
			return server(t, false, func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, ok.URL, http.StatusFound)
			}).URL
		}, false},
		{"nothing listening", closedURL, false},
		{"self-signed TLS", func(t *testing.T) string { return server(t, true, status(200, "ok")).URL + "/healthz" }, true},
		{"TLS 500", func(t *testing.T) string { return server(t, true, status(500, "")).URL }, false},
		{"not a URL", func(*testing.T) string { return "::not a url" }, false},
	} {
		t.Run(tc.label, func(t *testing.T) {
			tg := Target{Name: "kube-scheduler", Binary: "unused", Health: tc.url(t)}
			if !HasListener(tg) {
				t.Fatal("HasListener false with Health set")
			}
			if got := self().Active(ctx, tg); got != tc.want {
				t.Fatalf("Active(%s) = %v, want %v", tg.Health, got, tc.want)
			}
		})
	}
}

func TestActiveRequestShape(t *testing.T) {
	var closeAsked, proxied atomic.Bool
	s := server(t, false, func(w http.ResponseWriter, r *http.Request) {
		closeAsked.Store(r.Close)
		proxied.Store(r.URL.IsAbs()) // a proxy gets the absolute URL
		w.WriteHeader(200)
	})
	// A proxy in the environment must not be used, even one that would
	// take localhost (Go's environment proxy skips loopback anyway; the
	// client must not depend on that).
	t.Setenv("HTTP_PROXY", closedURL(t))
	t.Setenv("HTTPS_PROXY", closedURL(t))
	t.Setenv("NO_PROXY", "")
	if !Active(context.Background(), Target{Name: "x", Health: s.URL}) {
		t.Fatal("Active = false")
	}
	if !closeAsked.Load() {
		t.Error("request did not ask to close the connection (keep-alives on)")
	}
	if proxied.Load() {
		t.Error("request went through a proxy")
	}
}

func TestActiveSlowAnswerTimesOut(t *testing.T) {
	release := make(chan struct{})
	s := server(t, false, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if self().Active(ctx, Target{Name: "x", Health: s.URL}) {
		t.Fatal("Active = true for a server that never answers")
	}
}

func TestActiveWithoutListener(t *testing.T) {
	name := uniqueName(t, "vip")
	tg := Target{Name: "kube-vip", Binary: name}
	if HasListener(tg) {
		t.Fatal("HasListener true without Health")
	}
	ctx := context.Background()
	if self().Active(ctx, tg) {
		t.Fatal("Active with nothing running")
	}
	startHelper(t, name, "sleep")
	if !self().Active(ctx, tg) {
		t.Fatal("Active = false with the process running")
	}
	if err := self().WaitActive(ctx, tg, 5*time.Second); err != nil {
		t.Fatalf("WaitActive: %v", err)
	}
	err := self().WaitActive(ctx, Target{Name: "kube-vip", Binary: name + "-none"}, 100*time.Millisecond)
	if err == nil || err.Error() != "kube-vip did not start running within 100ms (no process of "+name+"-none is running); check kubelet's log (journalctl -u kubelet)" {
		t.Fatalf("WaitActive with nothing running: %v", err)
	}
}

func TestWaitActive(t *testing.T) {
	ctx := context.Background()

	t.Run("becomes healthy", func(t *testing.T) {
		var n atomic.Int32
		s := server(t, true, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) < 4 {
				http.Error(w, "not yet", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(200)
		})
		tg := Target{Name: "kube-apiserver", Health: s.URL + "/readyz"}
		if err := self().WaitActive(ctx, tg, 30*time.Second); err != nil {
			t.Fatalf("WaitActive: %v", err)
		}
		if n.Load() < 4 {
			t.Fatalf("answered after %d requests, want 4", n.Load())
		}
	})

	for _, tc := range []struct {
		label string
		url   func(t *testing.T) string
		says  []string
	}{
		{"HTTP 500", func(t *testing.T) string {
			return server(t, false, status(500, "[-]etcd failed: reason withheld\n")).URL + "/healthz"
		}, []string{`(last answer: HTTP 500 Internal Server Error: "[-]etcd failed: reason withheld")`}},
		{"long body", func(t *testing.T) string {
			return server(t, false, status(503, strings.Repeat("x", 10000))).URL
		}, []string{"(last answer: HTTP 503 Service Unavailable: \"" + strings.Repeat("x", 100), "...\")"}},
		{"connection refused", closedURL, []string{"(nothing listens on 127.0.0.1:"}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			tg := Target{Name: "kube-scheduler", Health: tc.url(t)}
			err := self().WaitActive(ctx, tg, 300*time.Millisecond)
			if err == nil {
				t.Fatal("WaitActive succeeded")
			}
			says := append([]string{"kube-scheduler did not answer healthy on " + tg.Health + " within 300ms (", "); check its log (crictl ps -a --name kube-scheduler, then crictl logs ID)"}, tc.says...)
			for _, want := range says {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if len(err.Error()) > 1000 {
				t.Errorf("error is %d bytes long", len(err.Error()))
			}
			if !isDeadline(err) {
				t.Errorf("error %q does not wrap context.DeadlineExceeded", err)
			}
		})
	}

	t.Run("last failure is not the deadline", func(t *testing.T) {
		// Every request hangs past the wait's deadline: the error still
		// says which URL, and that it timed out.
		release := make(chan struct{})
		s := server(t, false, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		defer close(release)
		tg := Target{Name: "etcd", Health: s.URL + "/health"}
		err := self().WaitActive(ctx, tg, 200*time.Millisecond)
		if err == nil || !strings.HasPrefix(err.Error(), "etcd did not answer healthy on "+tg.Health+" within 200ms (no answer from ") {
			t.Fatalf("WaitActive against a hanging server: %v", err)
		}
	})
}
