package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// quiet is where WaitActive waits: one poll set, parked in Go's network
// poller, holding a timer descriptor for the pauses between probes and,
// during a probe, its socket; every system call it makes after it is set
// up is on a non-blocking descriptor and made raw.
//
// Why raw: a goroutine that makes an ordinary system call tells the
// runtime, which then wakes its monitor thread (sysmon) if it was asleep,
// and the monitor then checks every 20 microseconds until every processor
// is idle again. A probe wakes up three times (the pause's end, the
// server's handshake, its answer), and each of those short bursts of work
// paid for several wakeups of the monitor, on a small VM 0.05 to 0.25 ms
// of CPU each. A raw system call (unix.RawSyscall) does not tell the
// runtime; that is safe only for one that cannot block, which a call on a
// non-blocking descriptor cannot. The runtime's own poller wakes the
// goroutine, without a system call of Go's.
type quiet struct {
	set   *pollSet
	timer int // timerfd, in set under timerKey
}

// Keys in a quiet's poll set.
const (
	timerKey int32 = -2
	sockKey  int32 = -3
)

// newQuiet sets up a quiet, or returns an error when a timer descriptor or
// the runtime's poller is not available (the caller then waits as before).
func newQuiet() (*quiet, error) {
	set, err := newPollSet()
	if err != nil {
		return nil, err
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		set.close()
		return nil, fmt.Errorf("quiet wait: %w", os.NewSyscallError("timerfd_create", err))
	}
	if err := set.add(fd, timerKey); err != nil {
		unix.Close(fd)
		set.close()
		return nil, err
	}
	return &quiet{set: set, timer: fd}, nil
}

// close releases q's descriptors.
func (q *quiet) close() {
	unix.Close(q.timer)
	q.set.close()
}

// sleep pauses for d, or until ctx ends.
func (q *quiet) sleep(ctx context.Context, d time.Duration) {
	if d <= 0 || ctx.Err() != nil {
		return
	}
	end := time.Now().Add(d)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	if err := unix.TimerfdSettime(q.timer, 0, &spec, nil); err != nil {
		timerSleep(ctx, d)
		return
	}
	// Disarm and drain on every way out: an expiry left unread would keep
	// the set readable and wake the next wait at once.
	defer func() {
		_ = unix.TimerfdSettime(q.timer, 0, &unix.ItimerSpec{}, nil)
		var n [8]byte
		_, _ = rawRead(q.timer, n[:])
	}()
	// A second's slack on the set's own deadline: the timer ends the pause.
	if _, err := q.until(ctx, timerKey, end.Add(time.Second)); err != nil {
		timerSleep(ctx, time.Until(end))
	}
}

// waitFD waits until fd is ready for events (unix.EPOLLIN or EPOLLOUT),
// deadline passes or ctx ends; it reports whether fd became ready. An
// error means the wait itself failed.
func (q *quiet) waitFD(ctx context.Context, fd int, events uint32, deadline time.Time) (bool, error) {
	if err := q.set.watch(fd, sockKey, events); err != nil {
		return false, err
	}
	defer q.set.remove(fd)
	return q.until(ctx, sockKey, deadline)
}

// until waits until the set reports key, deadline passes or ctx ends.
func (q *quiet) until(ctx context.Context, key int32, deadline time.Time) (bool, error) {
	for {
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return false, nil
		}
		keys, err := q.set.wait(ctx, deadline)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			if k == key {
				return true, nil
			}
		}
	}
}

// The raw system calls: each on a non-blocking descriptor only, where it
// cannot block (see quiet for why raw).

func rawRead(fd int, b []byte) (int, error)  { return rawIO(unix.SYS_READ, fd, b) }
func rawWrite(fd int, b []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, b) }

// rawIO is read(2) or write(2) (trap) of b on fd.
func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawClose closes a socket. Without SO_LINGER, close(2) of a socket does
// not wait for unsent data.
func rawClose(fd int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0); e != 0 {
		return e
	}
	return nil
}

func rawSetsockoptInt(fd, level, opt, value int) error {
	v := int32(value)
	if _, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), 4, 0); e != 0 {
		return e
	}
	return nil
}

func rawGetsockoptInt(fd, level, opt int) (int, error) {
	var v int32
	l := uint32(4)
	if _, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return 0, e
	}
	return int(v), nil
}

// rawConnect starts a connect on a non-blocking socket: nil, EINPROGRESS,
// or the failure (ECONNREFUSED on loopback with nothing listening).
func rawConnect(fd int, sa unix.Sockaddr) error {
	var (
		p unsafe.Pointer
		l uintptr
	)
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		rsa := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr}
		rsa.Port = htons(uint16(a.Port))
		p, l = unsafe.Pointer(&rsa), unsafe.Sizeof(rsa)
	case *unix.SockaddrInet6:
		rsa := unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.Addr}
		rsa.Port = htons(uint16(a.Port))
		p, l = unsafe.Pointer(&rsa), unsafe.Sizeof(rsa)
	default:
		return errors.New("rawConnect: address family not supported")
	}
	if _, _, e := unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(p), l); e != 0 {
		return e
	}
	return nil
}

// htons is port in network byte order, as the sockaddr's field holds it.
func htons(port uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&port))
	b[0], b[1] = byte(port>>8), byte(port)
	return port
}
