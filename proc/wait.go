package proc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"golang.org/x/sys/unix"
)

// Poll pacing shared by every wait: the first check runs at once, then the
// interval starts at firstInterval and doubles up to maxInterval.
const (
	firstInterval = 10 * time.Millisecond
	maxInterval   = 250 * time.Millisecond
)

// watchedInterval is the pause between the checks of a WaitReplaced that
// the kernel's exec events wake: those checks are only a safety net for
// what the events do not report (a process of the binary forked without an
// exec, lost events).
const watchedInterval = 2 * time.Second

func newBackOff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     firstInterval,
		RandomizationFactor: 0,
		Multiplier:          2,
		MaxInterval:         maxInterval,
		MaxElapsedTime:      0, // the caller's deadline ends the wait
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	return b
}

// check is one poll of a wait: done, or why not yet.
type check func(ctx context.Context) (done bool, why error)

// pacer says how long to pause after a check that failed for why.
type pacer func(why error) time.Duration

// backoffPacer is the default pacing: firstInterval doubling up to
// maxInterval, whatever the failure.
func backoffPacer() pacer {
	b := newBackOff()
	return func(error) time.Duration { return b.NextBackOff() }
}

// pause waits up to d, or until ctx ends. It may return early (a watched
// process exited); the wait then checks again.
type pause func(ctx context.Context, d time.Duration)

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// waitFor runs c until it reports done, ctx ends or timeout passes, pausing
// between checks with p for as long as next says. It returns nil once
// done; otherwise we, completed: how long it waited, ctx's error
// (context.DeadlineExceeded on timeout) and the last reason c gave. A
// timeout <= 0 allows a single check.
func waitFor(ctx context.Context, we *WaitError, timeout time.Duration, c check, next pacer, p pause) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, max(timeout, 0))
	defer cancel()
	var why error
	for {
		done, w := c(ctx)
		if done {
			return nil
		}
		// A check cut short by the deadline says only that; keep the reason
		// the check before it gave.
		if w != nil && (why == nil || ctx.Err() == nil) {
			why = w
		}
		if ctx.Err() != nil {
			break
		}
		p(ctx, next(w))
		if ctx.Err() != nil {
			break
		}
	}
	we.Timeout, we.Elapsed = max(timeout, 0), time.Since(start).Round(time.Millisecond)
	we.Last, we.cause = why, ctx.Err()
	return we
}

// WaitReplaced waits until Replaced(t, m) is done: once a changed manifest
// is written, until kubelet has taken down whatever ran before it and runs
// at least one process started after m. It returns nil once that holds. On
// timeout (or when ctx ends) the error is a *WaitError: "kubelet did not
// start a new <name> within <timeout> of its manifest being written" with
// the pids still running from before m, or that no process of t.Binary is
// running, or the last error reading /proc (m's ticks and boot id and the
// start ticks are in its Detail). Reading errors are retried until the
// deadline: they are unknown, not an answer.
//
// Every decision is a full Replaced check; what happens in between only
// decides when the next check runs. On the procfs of this process's own pid
// namespace, where the kernel's process events connector is available
// (root on the host: CAP_NET_ADMIN in the initial namespaces), the wait is
// driven by events: it waits for the processes that predate m to exit (on
// pidfds, Linux 5.3 and later), then for the exec of a process whose
// argv[0] names t.Binary, checks at once when one happens, and otherwise
// only every two seconds. Where the events are not available it polls: at
// once, then after 10 ms doubling up to 250 ms.
func (s *Scanner) WaitReplaced(ctx context.Context, t Target, m Mark, timeout time.Duration) error {
	if m.BootID == "" {
		return fmt.Errorf("waiting for %s to be replaced: mark has no boot id (take it with Mark)", t.Name)
	}
	we := &WaitError{
		Component: t.Name,
		Awaited:   "kubelet to start a new " + t.Name,
		Failed:    "kubelet did not start a new " + t.Name,
		After:     "of its manifest being written",
		Advice:    kubeletLog,
		Detail:    fmt.Sprintf("mark: tick %d of boot %s", m.Ticks, m.BootID),
	}
	// Subscribed before the first check, so that no exec falls between.
	w := s.watchExecs()
	defer w.close()
	var (
		stale    []Process
		answered bool // the last check read /proc: its failure is an answer
		polled   = backoffPacer()
		binary   = path.Base(t.Binary)
	)
	next := func(why error) time.Duration {
		if w != nil && answered {
			return watchedInterval
		}
		// Polled, or /proc could not be read: retried at the shared pace.
		return polled(why)
	}
	return waitFor(ctx, we, timeout, func(context.Context) (bool, error) {
		done, st, err := s.Replaced(t, m)
		stale, answered = st, err == nil
		switch {
		case err != nil:
			return false, err
		case done:
			return true, nil
		case len(st) > 0:
			we.Detail = fmt.Sprintf("mark: tick %d of boot %s; still running from before it: %s", m.Ticks, m.BootID, describe(st))
			return false, fmt.Errorf("still running: %s, started before the write", describePIDs(st))
		default:
			return false, fmt.Errorf("no process of %s is running", t.Binary)
		}
	}, next, func(ctx context.Context, d time.Duration) {
		s.awaitChange(ctx, d, stale, w, binary)
	})
}

// WaitGone waits until no process of t.Binary runs (a zombie does not run).
// It returns nil once PIDs reports none. On timeout (or when ctx ends) the
// error (a *WaitError) lists the survivors' pids (start ticks in Detail), or gives the last error
// reading /proc: an unreadable table is retried until the deadline, never
// taken for gone.
//
// Between scans it waits on pidfds of the survivors where the kernel offers
// them (Linux 5.3 and later, and only for the procfs of this process's own
// pid namespace), so an exit is seen at once; otherwise it polls.
func (s *Scanner) WaitGone(ctx context.Context, t Target, timeout time.Duration) error {
	var survivors []Process
	we := &WaitError{Component: t.Name, Awaited: t.Name + " to exit", Failed: t.Name + " did not exit", Advice: kubeletLog}
	return waitFor(ctx, we, timeout, func(context.Context) (bool, error) {
		ps, err := s.PIDs(t.Binary)
		if err != nil {
			survivors = nil
			return false, err
		}
		survivors = ps
		if len(ps) == 0 {
			return true, nil
		}
		we.Detail = "still running: " + describe(ps)
		return false, fmt.Errorf("still running: %s", describePIDs(ps))
	}, backoffPacer(), func(ctx context.Context, d time.Duration) {
		s.awaitChange(ctx, d, survivors, nil, "")
	})
}

// awaitChange pauses a wait for up to d (and no longer than ctx allows)
// and returns early when something happens that may end the wait, or ctx
// ends. Without w: one of ps exits (watched on pidfds, on the live procfs
// only). With w (a WaitReplaced, ps its stale processes): once every one of
// ps has exited, w reports the exec of a process whose argv[0] base name
// is binary (or lost events); exits alone do not end the pause, as no
// process of binary is left then. With nothing to watch it sleeps.
func (s *Scanner) awaitChange(ctx context.Context, d time.Duration, ps []Process, w *execWatch, binary string) {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	if d <= 0 || ctx.Err() != nil {
		return
	}
	var pidfds []int
	defer func() {
		for _, fd := range pidfds {
			unix.Close(fd)
		}
	}()
	if s.live {
		for _, p := range ps {
			fd, err := unix.PidfdOpen(p.PID, 0)
			if errors.Is(err, unix.ESRCH) {
				return // already gone: check again at once
			}
			if err != nil {
				// No pidfds here (a kernel before 5.3): exits are polled.
				for _, fd := range pidfds {
					unix.Close(fd)
				}
				pidfds = nil
				break
			}
			pidfds = append(pidfds, fd)
			// The pid may have been reused between the scan and the open:
			// then the process scanned is gone.
			ticks, alive, err := s.StartTicks(p.PID)
			if err != nil || !alive || ticks != p.StartTicks {
				return
			}
		}
	}
	switch {
	case len(pidfds) == 0 && len(ps) > 0:
		// Exits cannot be watched: poll them at the shared pace at most.
		sleep(ctx, min(d, maxInterval))
		return
	case len(pidfds) == 0 && w == nil:
		sleep(ctx, d)
		return
	}
	// ctx ending is one more event: an eventfd it writes to.
	cancelled, stop, err := ctxEventFD(ctx)
	if err != nil {
		sleep(ctx, d)
		return
	}
	defer stop()
	fds := make([]unix.PollFd, 0, len(pidfds)+2)
	fds = append(fds, unix.PollFd{Fd: int32(cancelled), Events: unix.POLLIN})
	watched := -1
	if w != nil {
		// While a process in ps runs, a WaitReplaced cannot end but by its
		// exit: execs are read (and those that do not matter dropped) once
		// none of them is left. A negative descriptor is ignored by poll.
		watched = len(fds)
		fd := int32(w.fd)
		if len(pidfds) > 0 {
			fd = -1
		}
		fds = append(fds, unix.PollFd{Fd: fd, Events: unix.POLLIN})
	}
	for _, fd := range pidfds {
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	running := len(pidfds)
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return
		}
		n, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			sleep(ctx, left)
			return
		}
		if n == 0 {
			continue
		}
		for i := range fds {
			if fds[i].Revents == 0 {
				continue
			}
			fds[i].Revents = 0
			switch {
			case i == 0:
				return // ctx ended
			case i == watched:
				if w.relevant(s, binary) {
					return // a process of binary may have started
				}
			case w == nil:
				return // a watched process exited
			default:
				// A watched process exited: once none is left, a process
				// of binary starting is what can end the wait.
				fds[i].Fd = -1
				if running--; running == 0 {
					fds[watched].Fd = int32(w.fd)
				}
			}
		}
	}
}

// ctxEventFD returns an eventfd that becomes readable when ctx ends, and
// the function that releases it. stop must be called once, after the last
// use of the descriptor; it returns once nothing writes to it any more.
func ctxEventFD(ctx context.Context) (fd int, stop func(), err error) {
	fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, nil, err
	}
	fired := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(fired)
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(fd, one[:])
	})
	return fd, func() {
		if !cancel() {
			<-fired // running or run: wait before the descriptor is reused
		}
		unix.Close(fd)
	}, nil
}

// describe formats processes for an error: "pid 12 (started at tick 345)".
func describe(ps []Process) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("pid %d (started at tick %d)", p.PID, p.StartTicks)
	}
	return strings.Join(parts, ", ")
}

// The proc connector's protocol (linux/connector.h, linux/cn_proc.h).
const (
	cnIdxProc         = 1 // CN_IDX_PROC, also the multicast group
	cnValProc         = 1 // CN_VAL_PROC
	procCnMcastListen = 1 // PROC_CN_MCAST_LISTEN
	procCnMcastIgnore = 2 // PROC_CN_MCAST_IGNORE
	procEventNone     = 0 // PROC_EVENT_NONE: an acknowledgement
	procEventExec     = 2 // PROC_EVENT_EXEC
	nlHdrLen          = unix.SizeofNlMsghdr
	cnMsgLen          = 20 // struct cn_msg without data
	procEventLen      = 16 // struct proc_event up to event_data
)

// execWatch is a subscription to the kernel's process events connector
// (CONFIG_PROC_EVENTS), which reports every exec on the machine: it lets
// WaitReplaced see a new process of a component the moment kubelet's
// runtime execs it, instead of at its next poll, at no cost while nothing
// execs. Subscribing needs CAP_NET_ADMIN in the initial user namespace and
// a process in the initial pid namespace (root on the host, as the product
// runs); where it fails, waits poll. Linux 6.6 and later deliver only exec
// events to it; earlier kernels deliver every process event and relevant
// skips the others.
//
// A nil *execWatch is valid: it watches nothing.
type execWatch struct {
	fd  int
	buf []byte
	arg []byte
}

// watchExecs subscribes to exec events for s, or returns nil when s is not
// the live procfs or the kernel refuses.
func (s *Scanner) watchExecs() *execWatch {
	if !s.live {
		return nil
	}
	w, err := openExecWatch()
	if err != nil {
		return nil
	}
	return w
}

func openExecWatch() (*execWatch, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, err
	}
	w := &execWatch{fd: fd, buf: make([]byte, 16<<10), arg: make([]byte, 512)}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Room for bursts of events between two reads; a smaller buffer is
	// fine too (an overflow makes the wait check at once).
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	ack := rand.Uint32() >> 2
	if err := w.send(ack, procCnMcastListen); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// The kernel acknowledges a subscription synchronously to every
	// listener; no acknowledgement means it dropped the request (another
	// namespace, or no CONFIG_PROC_EVENTS).
	if err := w.awaitAck(ack+1, 100*time.Millisecond); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Exec events only, on kernels that filter (an earlier kernel ignores
	// this form and keeps the subscription to every event).
	_ = w.send(ack+2, procCnMcastListen, procEventExec)
	return w, nil
}

// send sends a proc connector control message carrying ops.
func (w *execWatch) send(ack uint32, ops ...uint32) error {
	msg := make([]byte, nlHdrLen+cnMsgLen+4*len(ops))
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.NLMSG_DONE)
	ne.PutUint32(msg[8:], ack) // nlmsg_seq
	cn := msg[nlHdrLen:]
	ne.PutUint32(cn[0:], cnIdxProc)
	ne.PutUint32(cn[4:], cnValProc)
	ne.PutUint32(cn[8:], ack)  // seq
	ne.PutUint32(cn[12:], ack) // ack
	ne.PutUint16(cn[16:], uint16(4*len(ops)))
	for i, op := range ops {
		ne.PutUint32(cn[cnMsgLen+4*i:], op)
	}
	return unix.Sendto(w.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// awaitAck reads messages until the acknowledgement numbered ack arrives
// (nil, or the error the kernel reports in it), or timeout passes.
func (w *execWatch) awaitAck(ack uint32, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errors.New("proc connector: no acknowledgement of the subscription")
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		n, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
			continue
		}
		if err != nil {
			return err
		}
		var got error
		found := false
		eachEvent(w.buf[:n], func(cnAck uint32, what uint32, data []byte) {
			if what == procEventNone && cnAck == ack && len(data) >= 4 {
				found = true
				if e := binary.NativeEndian.Uint32(data); e != 0 {
					got = fmt.Errorf("proc connector: subscription refused: %w", unix.Errno(e))
				}
			}
		})
		if found {
			return got
		}
	}
}

// relevant reads every pending message and reports whether one may end a
// wait for binary want: the exec of a process whose argv[0] base name is
// want,
// a message it could not read, or lost messages (the socket's buffer
// overflowed). Only the reading is cheap; whether that process counts is
// for the wait's own check.
func (w *execWatch) relevant(s *Scanner, want string) bool {
	found := false
	for {
		n, err := unix.Read(w.fd, w.buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return found
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			found = true
			continue
		case err != nil:
			return true
		}
		eachEvent(w.buf[:n], func(_ uint32, what uint32, data []byte) {
			if found || what != procEventExec || len(data) < 8 {
				return
			}
			tgid := int(binary.NativeEndian.Uint32(data[4:]))
			var arg0 []byte
			arg0, w.arg, err = s.argv0(tgid, w.arg)
			if err == nil && string(baseName(arg0)) == want {
				found = true
			}
		})
	}
}

// eachEvent calls fn for every proc connector event in a datagram: the
// connector message's ack, the event's what, and its event_data.
func eachEvent(b []byte, fn func(ack, what uint32, data []byte)) {
	ne := binary.NativeEndian
	for len(b) >= nlHdrLen {
		l := int(ne.Uint32(b))
		if l < nlHdrLen || l > len(b) {
			return
		}
		msg := b[nlHdrLen:l]
		if len(msg) >= cnMsgLen+procEventLen && ne.Uint32(msg[0:]) == cnIdxProc && ne.Uint32(msg[4:]) == cnValProc {
			ev := msg[cnMsgLen:]
			fn(ne.Uint32(msg[12:]), ne.Uint32(ev[0:]), ev[procEventLen:])
		}
		l = (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if l > len(b) {
			return
		}
		b = b[l:]
	}
}

// close ends the subscription.
func (w *execWatch) close() {
	if w == nil {
		return
	}
	_ = w.send(0, procCnMcastIgnore)
	unix.Close(w.fd)
}
