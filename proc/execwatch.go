package proc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

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
	fd int
	// f is a duplicate of fd that Go's runtime poller watches, made at
	// the first wait (see wait).
	f   *os.File
	buf []byte
	arg []byte
	// found are the pids relevant saw exec under the watched name, lost
	// whether it missed or could not read an event; take drains both.
	found []int
	lost  bool
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
// want (its pid is kept for take), or lost messages (the socket's buffer
// overflowed, a read failed, an exec'd process's argv[0] could not be read
// for another reason than its exit), after which only a scan of the whole
// table can tell. Only the reading is cheap; whether that process counts
// is for the wait's own check.
func (w *execWatch) relevant(s *Scanner, want string) bool {
	for {
		n, err := unix.Read(w.fd, w.buf)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return w.lost || len(w.found) > 0
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			w.lost = true
			continue
		case err != nil:
			w.lost = true
			return true
		}
		eachEvent(w.buf[:n], func(_ uint32, what uint32, data []byte) {
			if w.lost || what != procEventExec || len(data) < 8 {
				return
			}
			tgid := int(binary.NativeEndian.Uint32(data[4:]))
			var arg0 []byte
			arg0, w.arg, err = s.argv0(tgid, w.arg)
			switch {
			case err == nil && string(baseName(arg0)) == want:
				w.found = append(w.found, tgid)
			case err != nil && !isGone(err):
				w.lost = true
			}
		})
	}
}

// take returns the pids relevant has found since the last take, and
// whether messages were lost meanwhile, and forgets both. A nil watch has
// found nothing and lost everything.
func (w *execWatch) take() (found []int, lost bool) {
	if w == nil {
		return nil, true
	}
	found, lost = w.found, w.lost
	w.found, w.lost = nil, false
	return found, lost
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

// wait waits until ready (which reads w's pending events) reports true,
// deadline passes or ctx ends; ready is asked at once and then each time
// events arrive. It reports whether ready did.
//
// The poller watches a duplicate of the socket made at the first wait,
// not the socket from the subscription on: every exec on the machine
// wakes the poller of a process that watches it, which is of no use while
// nothing waits for an exec (between Arm and the wait, and while the
// stale processes still run).
func (w *execWatch) wait(ctx context.Context, deadline time.Time, ready func() bool) (bool, error) {
	if w.f == nil {
		fd, err := unix.FcntlInt(uintptr(w.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return false, fmt.Errorf("watch exec events: %w", os.NewSyscallError("fcntl", err))
		}
		if w.f, err = pollable(fd, "exec events"); err != nil {
			return false, err
		}
	}
	return waitReadable(ctx, w.f, deadline, func(int) bool { return ready() })
}

// close ends the subscription.
func (w *execWatch) close() {
	if w == nil {
		return
	}
	_ = w.send(0, procCnMcastIgnore)
	if w.f != nil {
		w.f.Close()
	}
	unix.Close(w.fd)
}
