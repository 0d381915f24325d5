package proc

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"
)

// directProbe makes the health request req, whose host is an IP literal,
// on a connection of its own in the calling goroutine: a connect (on
// loopback refused or accepted at once), then for https the TLS handshake,
// one request asking to close and the answer, each read and write bounded
// by deadline and ended by ctx. It asks what healthClient asks, the same
// way (no proxy, no redirect followed, the certificate not verified, the
// same key exchange), and fails the same ways: a refused connection wraps
// ECONNREFUSED, an expired deadline is a net.Error whose Timeout is true,
// and once ctx ends the error is ctx's.
//
// It exists for CPU: http.Client runs a request on three goroutines (dial,
// read loop, write loop) and each hand-off between them costs a wakeup,
// about 0.1 ms of CPU each on a small VM; WaitActive probes a new process
// many times. Here a probe is a few system calls, and the goroutine parks
// in Go's network poller until the answers come: no OS thread blocks in a
// system call, so none is handed the goroutine's processor meanwhile.
func directProbe(ctx context.Context, req *http.Request, ap netip.AddrPort, deadline time.Time) (*http.Response, func(), error) {
	c, err := probeDialer.DialTCP(ctx, "tcp", netip.AddrPort{}, ap)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, err
	}
	// Every read and write is bounded by deadline; ctx ending moves the
	// deadline to the past, which wakes a waiting read or write at once.
	_ = c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	release := func() {
		stop()
		c.Close()
	}
	fail := func(err error) (*http.Response, func(), error) {
		release()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, err
	}
	var conn net.Conn = c
	if req.URL.Scheme == "https" {
		tc := tls.Client(c, healthTLS)
		// Handshake, not HandshakeContext: the latter watches ctx from a
		// goroutine of its own; the deadline above ends it on ctx.
		if err := tc.Handshake(); err != nil {
			return fail(err)
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
		return fail(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 4096), req)
	if err != nil {
		return fail(err)
	}
	// The status is the answer: closing the body does not read the rest
	// of it (a chunked body's last chunk may come in a later segment, one
	// more wakeup); release closes the connection under it.
	resp.Body = undrained{resp.Body}
	return resp, release, nil
}

// undrained is a response body whose Close leaves what was not read.
type undrained struct{ io.Reader }

func (undrained) Close() error { return nil }

// probeDialer connects the direct probes: no keep-alive probes (a probe's
// connection lives for one request), no fallback delay (one address).
var probeDialer = &net.Dialer{KeepAlive: -1}

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
