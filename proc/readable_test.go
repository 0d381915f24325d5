package proc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipe returns a pipe's read end as a pollable file and its write end,
// both closed at cleanup.
func pipe(t *testing.T) (*os.File, int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[1]) })
	f, err := pollable(p[0], "pipe")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, p[1]
}

// TestWaitReadable: a wait returns once the descriptor becomes readable,
// not before; a readable descriptor is reported at once.
func TestWaitReadable(t *testing.T) {
	r, w := pipe(t)
	time.AfterFunc(50*time.Millisecond, func() { _, _ = unix.Write(w, []byte{1}) })
	start := time.Now()
	ok, err := waitReadable(context.Background(), r, start.Add(time.Minute), nil)
	if err != nil || !ok {
		t.Fatalf("wait for a write = %v, %v; want ready", ok, err)
	}
	if took := time.Since(start); took < 40*time.Millisecond || took > 10*time.Second {
		t.Errorf("the wait took %s for a write 50ms later", took)
	}
	if ok, err := waitReadable(context.Background(), r, time.Now().Add(time.Minute), nil); err != nil || !ok {
		t.Fatalf("second wait on a readable pipe = %v, %v; want ready", ok, err)
	}
}

// TestWaitReadableAsksAgain: ready is asked at once and again at each
// event, and the wait ends only once it says so.
func TestWaitReadableAsksAgain(t *testing.T) {
	r, w := pipe(t)
	for i := range 3 {
		time.AfterFunc(time.Duration(20*(i+1))*time.Millisecond, func() { _, _ = unix.Write(w, []byte{1}) })
	}
	asked, got := 0, 0
	ok, err := waitReadable(context.Background(), r, time.Now().Add(time.Minute), func(fd int) bool {
		asked++
		var b [8]byte
		for {
			n, err := unix.Read(fd, b[:])
			if err != nil || n == 0 {
				break
			}
			got += n
		}
		return got >= 3
	})
	if err != nil || !ok {
		t.Fatalf("wait = %v, %v; want ready", ok, err)
	}
	if asked < 2 || asked > 4 {
		t.Errorf("ready was asked %d times for three writes, want 2 to 4", asked)
	}
}

// TestWaitReadableDeadline: with nothing to read the wait returns false
// and no error once the deadline passes, not before.
func TestWaitReadableDeadline(t *testing.T) {
	r, _ := pipe(t)
	start := time.Now()
	ok, err := waitReadable(context.Background(), r, start.Add(100*time.Millisecond), nil)
	took := time.Since(start)
	if err != nil || ok {
		t.Fatalf("wait = %v, %v; want not ready", ok, err)
	}
	if took < 95*time.Millisecond || took > 10*time.Second {
		t.Errorf("the wait with a 100ms deadline took %s", took)
	}
}

// TestWaitReadableCancelled: ctx ending wakes a wait at once, long before
// its deadline; a ctx ended already returns at once; the next wait on the
// same file still waits its whole time.
func TestWaitReadableCancelled(t *testing.T) {
	r, _ := pipe(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if ok, err := waitReadable(ctx, r, start.Add(time.Minute), nil); err != nil || ok {
		t.Fatalf("cancelled wait = %v, %v; want not ready", ok, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the cancelled wait took %s", took)
	}
	start = time.Now()
	if ok, err := waitReadable(ctx, r, start.Add(time.Minute), nil); err != nil || ok {
		t.Fatalf("wait on an ended ctx = %v, %v", ok, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a wait on an ended ctx took %s", took)
	}
	start = time.Now()
	if ok, err := waitReadable(context.Background(), r, start.Add(50*time.Millisecond), nil); err != nil || ok {
		t.Fatalf("wait after a cancelled one = %v, %v", ok, err)
	}
	if took := time.Since(start); took < 45*time.Millisecond {
		t.Errorf("the wait after a cancelled one took %s, want its 50ms", took)
	}
}

// TestWaitReadablePidfd: a pidfd is readable once its process exits.
func TestWaitReadablePidfd(t *testing.T) {
	cmd := startHelper(t, uniqueName(t, "pidfd"), "sleep")
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Skipf("no pidfds here: %v", err)
	}
	f, err := pollable(fd, "pidfd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ok, err := waitReadable(context.Background(), f, time.Now().Add(50*time.Millisecond), nil); err != nil || ok {
		t.Fatalf("wait while the process runs = %v, %v; want not ready", ok, err)
	}
	time.AfterFunc(50*time.Millisecond, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	if ok, err := waitReadable(context.Background(), f, time.Now().Add(time.Minute), nil); err != nil || !ok {
		t.Fatalf("wait for the exit = %v, %v; want ready", ok, err)
	}
}

// TestPollableRegularFile: a descriptor the poller cannot watch (a
// regular file) is refused with an error naming it, and closed.
func TestPollableRegularFile(t *testing.T) {
	fd, err := unix.Open(filepath.Join(t.TempDir(), "f"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f, err := pollable(fd, "a regular file")
	if err == nil {
		f.Close()
		t.Fatal("a regular file was taken as pollable")
	}
	if !strings.Contains(err.Error(), "a regular file") {
		t.Errorf("error %q does not name the descriptor", err)
	}
}

// TestSleep: a pause lasts d, not less, and ends when ctx does.
func TestSleep(t *testing.T) {
	start := time.Now()
	sleep(context.Background(), 20*time.Millisecond)
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Fatalf("sleep(20ms) took %s", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start = time.Now()
	sleep(ctx, time.Minute)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a cancelled sleep of a minute took %s", took)
	}
}

// TestAwaitChangeLeavesNothingOpen: the pauses of WaitGone and
// WaitReplaced close the pidfds they open and the exec watch's descriptors
// when it closes, whether the pause ran out or a process exited.
func TestAwaitChangeLeavesNothingOpen(t *testing.T) {
	s := self()
	name := uniqueName(t, "leak")
	cmd := startHelper(t, name, "sleep")
	ps, err := s.PIDs(name)
	if err != nil || len(ps) != 1 {
		t.Fatalf("PIDs(%s) = %v, %v", name, ps, err)
	}
	fds := openFDs(t)
	ctx := context.Background()
	for range 10 {
		if why := s.awaitChange(ctx, 5*time.Millisecond, ps, nil, ""); why != wokeOther {
			t.Fatalf("a pause while the process runs woke for %v", why)
		}
	}
	if w := s.watchExecs(); w != nil {
		for range 10 {
			s.awaitChange(ctx, 5*time.Millisecond, nil, w, name)
		}
		w.close()
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	if why := s.awaitChange(ctx, time.Minute, ps, nil, ""); why != wokeExit {
		t.Fatalf("the pause woke for %v at the process's exit, want wokeExit", why)
	}
	if got := openFDs(t); got > fds {
		t.Fatalf("after the pauses %d descriptors are open, %d before", got, fds)
	}
}
