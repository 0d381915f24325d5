package proc

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pipe returns a pipe's read and write ends, closed at cleanup.
func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
	return p[0], p[1]
}

func newTestSet(t *testing.T) *pollSet {
	t.Helper()
	set, err := newPollSet()
	if err != nil {
		t.Fatalf("newPollSet: %v", err)
	}
	t.Cleanup(set.close)
	return set
}

// TestPollSetReadable: wait returns the keys of the descriptors that
// became readable, and only those.
func TestPollSetReadable(t *testing.T) {
	set := newTestSet(t)
	r1, w1 := pipe(t)
	r2, _ := pipe(t)
	if err := set.add(r1, 1); err != nil {
		t.Fatal(err)
	}
	if err := set.add(r2, -1); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { _, _ = unix.Write(w1, []byte{1}) })
	start := time.Now()
	keys, err := set.wait(context.Background(), start.Add(time.Minute))
	if err != nil || !slices.Equal(keys, []int32{1}) {
		t.Fatalf("wait = %v, %v; want [1]", keys, err)
	}
	if took := time.Since(start); took < 40*time.Millisecond || took > 10*time.Second {
		t.Errorf("wait took %s for a write 50ms later", took)
	}
	// Still readable: the next wait returns at once. Removed: it is not
	// reported any more.
	if keys, err := set.wait(context.Background(), time.Now().Add(time.Minute)); err != nil || !slices.Equal(keys, []int32{1}) {
		t.Fatalf("second wait = %v, %v; want [1]", keys, err)
	}
	if err := set.remove(r1); err != nil {
		t.Fatal(err)
	}
	if keys, err := set.wait(context.Background(), time.Now().Add(50*time.Millisecond)); err != nil || len(keys) != 0 {
		t.Fatalf("wait after remove = %v, %v; want nothing", keys, err)
	}
	if err := set.remove(r1); err == nil {
		t.Error("removing a descriptor twice did not fail")
	}
}

// TestPollSetDeadline: with nothing readable, wait returns no keys and no
// error once the deadline passes, not before.
func TestPollSetDeadline(t *testing.T) {
	set := newTestSet(t)
	r, _ := pipe(t)
	if err := set.add(r, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	keys, err := set.wait(context.Background(), start.Add(100*time.Millisecond))
	took := time.Since(start)
	if err != nil || len(keys) != 0 {
		t.Fatalf("wait = %v, %v; want nothing", keys, err)
	}
	if took < 95*time.Millisecond || took > 10*time.Second {
		t.Errorf("wait with a 100ms deadline took %s", took)
	}
}

// TestPollSetCancelled: ctx ending wakes a wait at once, long before its
// deadline; a ctx ended already returns at once.
func TestPollSetCancelled(t *testing.T) {
	set := newTestSet(t)
	r, _ := pipe(t)
	if err := set.add(r, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	keys, err := set.wait(ctx, start.Add(time.Minute))
	if err != nil || len(keys) != 0 {
		t.Fatalf("cancelled wait = %v, %v; want nothing", keys, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the cancelled wait took %s", took)
	}
	start = time.Now()
	if keys, err := set.wait(ctx, start.Add(time.Minute)); err != nil || len(keys) != 0 {
		t.Fatalf("wait on an ended ctx = %v, %v; want nothing", keys, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a wait on an ended ctx took %s", took)
	}
}

// TestPollSetPidfd: a pidfd in the set is reported when its process exits.
func TestPollSetPidfd(t *testing.T) {
	cmd := startHelper(t, uniqueName(t, "pidfd"), "sleep")
	fd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Skipf("no pidfds here: %v", err)
	}
	defer unix.Close(fd)
	set := newTestSet(t)
	if err := set.add(fd, 7); err != nil {
		t.Fatal(err)
	}
	if keys, err := set.wait(context.Background(), time.Now().Add(50*time.Millisecond)); err != nil || len(keys) != 0 {
		t.Fatalf("wait while the process runs = %v, %v; want nothing", keys, err)
	}
	time.AfterFunc(50*time.Millisecond, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	keys, err := set.wait(context.Background(), time.Now().Add(time.Minute))
	if err != nil || !slices.Equal(keys, []int32{7}) {
		t.Fatalf("wait for the exit = %v, %v; want [7]", keys, err)
	}
}

// TestPollSetBadDescriptor: adding a descriptor that is not open fails
// with an error naming it, and the set still works.
func TestPollSetBadDescriptor(t *testing.T) {
	set := newTestSet(t)
	r, _ := pipe(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	unix.Close(p[0])
	unix.Close(p[1])
	if err := set.add(p[0], 0); err == nil {
		t.Fatal("adding a closed descriptor succeeded")
	}
	if err := set.add(r, 1); err != nil {
		t.Fatal(err)
	}
}
