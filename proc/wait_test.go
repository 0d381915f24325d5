package proc

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWaitGone(t *testing.T) {
	ctx := context.Background()
	// Both ways of waiting between scans: pidfds on the live /proc, and
	// plain polling (what a procfs of another namespace gets).
	for _, tc := range []struct {
		label string
		s     func() *Scanner
	}{
		{"pidfd", self},
		{"polling", func() *Scanner { s := self(); s.live = false; return s }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			if tc.label == "pidfd" && !self().live {
				t.Fatal("the host scanner is not live: /proc/self does not name this process")
			}

			t.Run("exits on SIGTERM", func(t *testing.T) {
				name := uniqueName(t, "term")
				tg := Target{Name: "kube-scheduler", Binary: name}
				a := startHelper(t, name, "sleep")
				b := startHelper(t, name, "sleep")
				if err := a.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				errc := make(chan error, 1)
				go func() { errc <- tc.s().WaitGone(ctx, tg, 30*time.Second) }()
				time.Sleep(20 * time.Millisecond) // let the wait find b still running
				if err := b.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				// Neither is reaped: a zombie is gone.
				if err := <-errc; err != nil {
					t.Fatalf("WaitGone: %v", err)
				}
			})

			t.Run("ignores SIGTERM", func(t *testing.T) {
				name := uniqueName(t, "stubborn")
				tg := Target{Name: "kube-scheduler", Binary: name}
				cmd := startHelper(t, name, "ignoreterm")
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				err := tc.s().WaitGone(ctx, tg, 300*time.Millisecond)
				if err == nil {
					t.Fatal("WaitGone succeeded while the process runs")
				}
				for _, want := range []string{"kube-scheduler did not exit within 300ms (still running: pid " + itoa(cmd.Process.Pid) + "); check kubelet's log"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				if !isDeadline(err) {
					t.Errorf("error %q does not wrap context.DeadlineExceeded", err)
				}
			})
		})
	}

	t.Run("nothing running", func(t *testing.T) {
		if err := self().WaitGone(ctx, Target{Name: "x", Binary: uniqueName(t, "none")}, 0); err != nil {
			t.Fatalf("WaitGone with nothing running: %v", err)
		}
	})

	t.Run("unreadable table is not gone", func(t *testing.T) {
		root := fakeRoot(t, map[string]string{})
		s, err := NewScanner(root)
		if err != nil {
			t.Fatal(err)
		}
		s.root = root + "/missing"
		err = s.WaitGone(ctx, Target{Name: "etcd", Binary: "etcd"}, 100*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "etcd did not exit within 100ms") {
			t.Fatalf("WaitGone on an unreadable table: %v", err)
		}
	})
}

// TestWaitReplacedEventsOrPolling runs a replacement under both ways of
// pacing a WaitReplaced: woken by pidfds and exec events (the live /proc,
// as root), and plain polling (what a procfs of another namespace gets).
// Both must see the replacement; only when differs.
func TestWaitReplacedEventsOrPolling(t *testing.T) {
	for _, tc := range []struct {
		label string
		s     func() *Scanner
	}{
		{"events", self},
		{"polling", func() *Scanner { s := self(); s.live = false; return s }},
	} {
		t.Run(tc.label, func(t *testing.T) {
			if tc.label == "events" {
				w := self().watchExecs()
				if w == nil {
					t.Skip("needs the kernel's process events connector (root in the initial namespaces): make test as root")
				}
				w.close()
			}
			name := uniqueName(t, "replace")
			tg := Target{Name: "kube-scheduler", Binary: name}
			old := startHelper(t, name, "sleep")
			m, err := self().Mark()
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- tc.s().WaitReplaced(context.Background(), tg, m, time.Minute) }()
			// Let the wait find the old process first, so that it waits on
			// its exit and then on the new one's exec.
			time.Sleep(30 * time.Millisecond)
			_ = old.Process.Kill()
			_ = old.Wait()
			waitTickAfter(t, m)
			startHelper(t, name, "sleep")
			if err := <-errc; err != nil {
				t.Fatalf("WaitReplaced: %v", err)
			}
		})
	}
}

// TestWaitReplacedCancelledWhileWatching cancels a WaitReplaced that waits
// on a stale process's pidfd: it ends with ctx's error and still says
// what it waited for.
func TestWaitReplacedCancelledWhileWatching(t *testing.T) {
	name := uniqueName(t, "cancel")
	old := startHelper(t, name, "sleep")
	m, err := self().Mark()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	err = self().WaitReplaced(ctx, Target{Name: "kube-scheduler", Binary: name}, m, time.Minute)
	if err == nil {
		t.Fatal("WaitReplaced succeeded with only the old process running")
	}
	want := "stopped waiting for kubelet to start a new kube-scheduler after "
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), " (last seen: still running: pid "+itoa(old.Process.Pid)+", started before the write)") {
		t.Errorf("error %q does not say %q and which pid", err, want)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %q does not wrap context.Canceled", err)
	}
}

// TestExecWatch checks the proc connector subscription: the exec of a
// process under the watched name is reported, other execs are not.
func TestExecWatch(t *testing.T) {
	w, err := openExecWatch()
	if err != nil {
		t.Skipf("needs the kernel's process events connector (root in the initial namespaces): make test as root: %v", err)
	}
	defer w.close()
	s := self()
	name := uniqueName(t, "exec")
	startHelper(t, uniqueName(t, "other"), "sleep")
	if relevantWithin(w, s, name, 200*time.Millisecond) {
		t.Fatal("an exec under another name was reported")
	}
	startHelper(t, name, "sleep")
	if !relevantWithin(w, s, name, 10*time.Second) {
		t.Fatal("the exec of a process under the watched name was not reported")
	}
}

// relevantWithin polls w for up to d and reports whether it saw an exec of
// name.
func relevantWithin(w *execWatch, s *Scanner, name string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 50); n > 0 && w.relevant(s, name) {
			return true
		}
	}
	return false
}

// TestEachEvent parses a datagram of two connector messages: an exec event
// and an acknowledgement.
func TestEachEvent(t *testing.T) {
	msg := func(ack, what uint32, data ...uint32) []byte {
		b := make([]byte, nlHdrLen+cnMsgLen+procEventLen+4*len(data))
		ne := binary.NativeEndian
		ne.PutUint32(b[0:], uint32(len(b)))
		cn := b[nlHdrLen:]
		ne.PutUint32(cn[0:], cnIdxProc)
		ne.PutUint32(cn[4:], cnValProc)
		ne.PutUint32(cn[12:], ack)
		ne.PutUint16(cn[16:], uint16(procEventLen+4*len(data)))
		ev := cn[cnMsgLen:]
		ne.PutUint32(ev[0:], what)
		for i, d := range data {
			ne.PutUint32(ev[procEventLen+4*i:], d)
		}
		return b
	}
	dgram := append(msg(0, procEventExec, 4242, 4242), msg(8, procEventNone, 0)...)
	dgram = append(dgram, 1, 2, 3) // a truncated tail is ignored
	type got struct{ ack, what, first uint32 }
	var seen []got
	eachEvent(dgram, func(ack, what uint32, data []byte) {
		seen = append(seen, got{ack, what, binary.NativeEndian.Uint32(data)})
	})
	want := []got{{0, procEventExec, 4242}, {8, procEventNone, 0}}
	if len(seen) != len(want) || seen[0] != want[0] || seen[1] != want[1] {
		t.Fatalf("eachEvent saw %v, want %v", seen, want)
	}
}

// TestActivePacer checks WaitActive's pacing: refusals start fast and grow
// slowly, other failures back off as every wait, and a change of kind
// starts the new kind's backoff over.
func TestActivePacer(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "https://127.0.0.1:1/healthz", Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	other := errors.New("GET https://127.0.0.1:1/healthz: HTTP 500")
	p := activePacer()
	for i, step := range []struct {
		why  error
		want time.Duration
	}{
		{refused, 5 * time.Millisecond},
		{refused, 7500 * time.Microsecond},
		{refused, 11250 * time.Microsecond},
		{other, 10 * time.Millisecond},
		{other, 20 * time.Millisecond},
		{refused, 5 * time.Millisecond},
		{other, 10 * time.Millisecond},
	} {
		if got := p(step.why); got != step.want {
			t.Fatalf("pause %d after %v: %v, want %v", i, step.why, got, step.want)
		}
	}
}

// TestWaitActiveListenerLater starts the listener only after the wait
// began with a refused connection.
func TestWaitActiveListenerLater(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	tg := Target{Name: "kube-scheduler", Health: "http://" + addr + "/healthz"}
	errc := make(chan error, 1)
	go func() { errc <- self().WaitActive(context.Background(), tg, 30*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })}
	go srv.Serve(l)
	defer srv.Close()
	if err := <-errc; err != nil {
		t.Fatalf("WaitActive: %v", err)
	}
}
