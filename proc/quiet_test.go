package proc

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestQuietSleep: a pause lasts d (not less), and a second pause on the
// same quiet does too: the first's expiry does not leave the set readable.
func TestQuietSleep(t *testing.T) {
	q := testQuiet(t)
	for i := range 3 {
		start := time.Now()
		q.sleep(context.Background(), 30*time.Millisecond)
		if took := time.Since(start); took < 30*time.Millisecond || took > 5*time.Second {
			t.Fatalf("pause %d of 30ms took %s", i, took)
		}
	}
}

// TestQuietSleepCancelled: ctx ending ends a pause at once, and the next
// pause on the same quiet still lasts its whole time.
func TestQuietSleepCancelled(t *testing.T) {
	q := testQuiet(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	q.sleep(ctx, time.Minute)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a cancelled pause of a minute took %s", took)
	}
	start = time.Now()
	q.sleep(context.Background(), 30*time.Millisecond)
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("the pause after a cancelled one took %s, want at least 30ms", took)
	}
	// Already ended: no pause at all.
	start = time.Now()
	q.sleep(ctx, time.Minute)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a pause with an ended ctx took %s", took)
	}
}

// TestSleep: the package's pause (a timer descriptor of its own) lasts d
// and ends when ctx does.
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

// TestQuietWaitFD: waitFD reports a descriptor that is ready, gives up at
// the deadline and when ctx ends on one that is not, and leaves the
// descriptor out of the set afterwards (a later wait is not woken by it).
func TestQuietWaitFD(t *testing.T) {
	q := testQuiet(t)
	r, w := pipe(t)
	ready, err := q.waitFD(context.Background(), r, unix.EPOLLIN, time.Now().Add(50*time.Millisecond))
	if err != nil || ready {
		t.Fatalf("empty pipe: ready %v, err %v", ready, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	start := time.Now()
	ready, err = q.waitFD(ctx, r, unix.EPOLLIN, time.Now().Add(time.Minute))
	if err != nil || ready || time.Since(start) > 10*time.Second {
		t.Fatalf("cancelled: ready %v, err %v after %s", ready, err, time.Since(start))
	}
	time.AfterFunc(20*time.Millisecond, func() { unix.Write(w, []byte("x")) })
	ready, err = q.waitFD(context.Background(), r, unix.EPOLLIN, time.Now().Add(time.Minute))
	if err != nil || !ready {
		t.Fatalf("written pipe: ready %v, err %v", ready, err)
	}
	// r is readable still, but no longer in the set: a pause lasts.
	start = time.Now()
	q.sleep(context.Background(), 30*time.Millisecond)
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("pause after a waitFD took %s: the descriptor stayed in the set", took)
	}
}

// TestHtons: the port in a raw socket address is in network byte order.
func TestHtons(t *testing.T) {
	p := htons(0x1234)
	b := (*[2]byte)(unsafe.Pointer(&p))
	if b[0] != 0x12 || b[1] != 0x34 {
		t.Fatalf("htons(0x1234) holds % x, want 12 34", b[:])
	}
}
