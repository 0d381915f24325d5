package proc

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// directProbe makes the health request req, whose host is an IP literal,
// on a socket of its own in the calling goroutine: a connect (on loopback
// refused or accepted at once), then for https the TLS handshake, one
// request asking to close and the answer, each read and write bounded by
// deadline and ended by ctx. It asks what healthClient asks, the same way
// (no proxy, no redirect followed, the certificate not verified, the same
// key exchange), and fails the same ways: a refused connection wraps
// ECONNREFUSED, an expired deadline is a net.Error whose Timeout is true.
//
// It exists for CPU: http.Client runs a request on three goroutines (dial,
// read loop, write loop) and each hand-off between them costs a wakeup,
// about 0.1 ms of CPU each on a small VM; WaitActive probes a new process
// many times. Here a probe is a few system calls, and wakes up only for
// the answers. It waits in poll(2), not in Go's network poller: its waits
// are short (the peer's answers on loopback), and a thread blocked that
// briefly wakes once, where a goroutine parked in the runtime's poller
// costs thread hand-offs; measured on the bench, the poller made a step's
// WaitActive dearer (docs/performance.md).
func directProbe(ctx context.Context, req *http.Request, ap netip.AddrPort, deadline time.Time) (*http.Response, func(), error) {
	c, err := dial(ctx, ap, deadline)
	if err != nil {
		return nil, nil, err
	}
	var conn net.Conn = c
	if req.URL.Scheme == "https" {
		tc := tls.Client(c, healthTLS)
		// Handshake, not HandshakeContext: the latter closes the
		// descriptor from another goroutine when ctx ends; c ends the
		// handshake on ctx by shutting the socket down instead.
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, nil, c.cause(err)
		}
		conn = tc
	}
	req.Close = true
	bw := bufio.NewWriterSize(conn, 512)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		c.Close()
		return nil, nil, c.cause(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), req)
	if err != nil {
		c.Close()
		return nil, nil, c.cause(err)
	}
	return resp, func() { c.Close() }, nil
}

// directAddr is u's host and port when the host is an IP literal and the
// scheme one directProbe speaks (http, https; default ports 80 and 443).
func directAddr(u *url.URL) (netip.AddrPort, bool) {
	if u.Scheme != "http" && u.Scheme != "https" || u.User != nil {
		return netip.AddrPort{}, false
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil || ip.Zone() != "" {
		return netip.AddrPort{}, false
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port <= 0 || port > 65535 {
			return netip.AddrPort{}, false
		}
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

// sockConn is a connected TCP socket as a net.Conn: non-blocking, each
// read and write waiting in poll for at most what is left until deadline.
// When ctx ends it is shut down, which wakes a waiting read or write.
type sockConn struct {
	ctx      context.Context
	fd       int
	remote   net.Addr
	deadline time.Time
	stop     func() bool
	fired    chan struct{} // closed once the shutdown on ctx has run
	once     sync.Once
}

// dial connects to ap. A refused connection is a *net.OpError wrapping
// ECONNREFUSED, as net.Dial's is.
func dial(ctx context.Context, ap netip.AddrPort, deadline time.Time) (*sockConn, error) {
	remote := net.TCPAddrFromAddrPort(ap)
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: remote, Err: err}
	}
	var (
		family int
		sa     unix.Sockaddr
	)
	if ap.Addr().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, opErr(os.NewSyscallError("socket", err))
	}
	c := &sockConn{ctx: ctx, fd: fd, remote: remote, deadline: deadline, fired: make(chan struct{})}
	c.stop = context.AfterFunc(ctx, func() {
		defer close(c.fired)
		_ = unix.Shutdown(fd, unix.SHUT_RDWR)
	})
	// Small writes go out at once (as net.Dial sets it): TLS records and
	// the request would otherwise wait for the peer's delayed ACK.
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	err = unix.Connect(fd, sa)
	if errors.Is(err, unix.EINPROGRESS) || errors.Is(err, unix.EINTR) {
		if err = c.await(unix.POLLOUT); err == nil {
			var soErr int
			soErr, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err == nil && soErr != 0 {
				err = unix.Errno(soErr)
			}
		}
	}
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ne net.Error
		if errors.As(err, &ne) {
			return nil, err
		}
		return nil, opErr(os.NewSyscallError("connect", err))
	}
	return c, nil
}

// await waits until fd is ready for events, the deadline passes (a
// timeout error) or ctx ends (the shutdown makes fd ready).
func (c *sockConn) await(events int16) error {
	for {
		left := time.Until(c.deadline)
		if left <= 0 {
			return &net.OpError{Op: "read", Net: "tcp", Addr: c.remote, Err: os.ErrDeadlineExceeded}
		}
		fds := []unix.PollFd{{Fd: int32(c.fd), Events: events}}
		_, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return os.NewSyscallError("poll", err)
		case fds[0].Revents != 0:
			return nil
		}
	}
}

func (c *sockConn) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(c.fd, b)
		switch {
		case err == nil && n == 0 && len(b) > 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case errors.Is(err, unix.EAGAIN):
			if err := c.await(unix.POLLIN); err != nil {
				return 0, err
			}
		case errors.Is(err, unix.EINTR):
		default:
			return 0, &net.OpError{Op: "read", Net: "tcp", Addr: c.remote, Err: os.NewSyscallError("read", err)}
		}
	}
}

func (c *sockConn) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Write(c.fd, b[done:])
		switch {
		case err == nil:
			done += n
		case errors.Is(err, unix.EAGAIN):
			if err := c.await(unix.POLLOUT); err != nil {
				return done, err
			}
		case errors.Is(err, unix.EINTR):
		default:
			return done, &net.OpError{Op: "write", Net: "tcp", Addr: c.remote, Err: os.NewSyscallError("write", err)}
		}
	}
	return done, nil
}

// cause is err, or ctx's error when ctx ended: a shut-down socket fails
// its reads and writes with whatever the peer makes of it.
func (c *sockConn) cause(err error) error {
	if c.ctx.Err() != nil {
		return c.ctx.Err()
	}
	return err
}

// Close releases the socket once; the shutdown on ctx cannot run after it.
func (c *sockConn) Close() error {
	c.once.Do(func() {
		if !c.stop() {
			// ctx ended: the shutdown ran or runs; closing under it could
			// shut down a descriptor reused meanwhile.
			<-c.fired
		}
		unix.Close(c.fd)
	})
	return nil
}

func (c *sockConn) LocalAddr() net.Addr  { return &net.TCPAddr{} }
func (c *sockConn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline moves the deadline of every read and write to t, when t is
// earlier than the probe's own; the probe's bound is never extended.
func (c *sockConn) SetDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(c.deadline) {
		c.deadline = t
	}
	return nil
}
func (c *sockConn) SetReadDeadline(t time.Time) error  { return c.SetDeadline(t) }
func (c *sockConn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }
