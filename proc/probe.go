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
// the answers; it waits in q, parked in Go's network poller, and its
// system calls are raw (see quiet).
func directProbe(ctx context.Context, q *quiet, req *http.Request, ap netip.AddrPort, deadline time.Time) (*http.Response, func(), error) {
	c, err := dial(ctx, q, ap, deadline)
	if err != nil {
		return nil, nil, err
	}
	var conn net.Conn = c
	if req.URL.Scheme == "https" {
		tc := tls.Client(c, healthTLS)
		// Handshake, not HandshakeContext: the latter closes the
		// descriptor from another goroutine when ctx ends; c's waits end
		// on ctx themselves.
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
// read and write made raw and, when it must wait, waiting in q (parked in
// Go's network poller) for at most what is left until deadline or until
// ctx ends.
type sockConn struct {
	ctx    context.Context
	q      *quiet
	fd     int
	remote net.Addr
	// deadline is the probe's bound; SetDeadline only moves it earlier.
	deadline time.Time
	closed   bool
}

// dial connects to ap. A refused connection is a *net.OpError wrapping
// ECONNREFUSED, as net.Dial's is.
func dial(ctx context.Context, q *quiet, ap netip.AddrPort, deadline time.Time) (*sockConn, error) {
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
	c := &sockConn{ctx: ctx, q: q, fd: fd, remote: remote, deadline: deadline}
	// Small writes go out at once (as net.Dial sets it): TLS records and
	// the request would otherwise wait for the peer's delayed ACK.
	_ = rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	// On loopback a connect is mostly decided within the call: refused, or
	// taken into the listener's backlog.
	err = rawConnect(fd, sa)
	if errors.Is(err, unix.EINPROGRESS) || errors.Is(err, unix.EINTR) {
		err = c.await(unix.EPOLLOUT, "dial")
		if err == nil {
			var soErr int
			if soErr, err = rawGetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soErr != 0 {
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

// await waits until the socket is ready for events: nil, a timeout
// *net.OpError once the deadline has passed, ctx's error once it ended.
func (c *sockConn) await(events uint32, op string) error {
	ready, err := c.q.waitFD(c.ctx, c.fd, events|unix.EPOLLERR|unix.EPOLLHUP, c.deadline)
	switch {
	case err != nil:
		return &net.OpError{Op: op, Net: "tcp", Addr: c.remote, Err: err}
	case ready:
		return nil
	case c.ctx.Err() != nil:
		return c.ctx.Err()
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: c.remote, Err: os.ErrDeadlineExceeded}
}

func (c *sockConn) Read(b []byte) (int, error) {
	for {
		n, err := rawRead(c.fd, b)
		switch {
		case err == nil && n == 0 && len(b) > 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case errors.Is(err, unix.EAGAIN):
			if err := c.await(unix.EPOLLIN|unix.EPOLLRDHUP, "read"); err != nil {
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
		n, err := rawWrite(c.fd, b[done:])
		switch {
		case err == nil:
			done += n
		case errors.Is(err, unix.EAGAIN):
			if err := c.await(unix.EPOLLOUT, "write"); err != nil {
				return done, err
			}
		case errors.Is(err, unix.EINTR):
		default:
			return done, &net.OpError{Op: "write", Net: "tcp", Addr: c.remote, Err: os.NewSyscallError("write", err)}
		}
	}
	return done, nil
}

// cause is err, or ctx's error when ctx ended.
func (c *sockConn) cause(err error) error {
	if c.ctx.Err() != nil {
		return c.ctx.Err()
	}
	return err
}

// Close releases the socket once. Nothing waits on it by then: its waits
// are in the calling goroutine.
func (c *sockConn) Close() error {
	if !c.closed {
		c.closed = true
		_ = rawClose(c.fd)
	}
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
