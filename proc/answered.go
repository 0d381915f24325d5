package proc

// Which process answered: with SO_REUSEPORT several instances of a
// component listen on one port and the kernel hands each new connection to
// one of them, so a health answer says nothing about which instance gave
// it until the connection's server side is found in a process's fds.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// errOtherInstance is an answer that a process outside the asked pod gave:
// not a failure of the pod's instance, the next connection hashes afresh.
var errOtherInstance = errors.New("answered by another instance")

// errUnattributed is an answer whose connection could not be tied to a
// socket of any process in the pod's network namespace.
var errUnattributed = errors.New("answer not attributable")

// answeredBy makes one health request to rawURL on a new TCP connection
// (a new source port, so SO_REUSEPORT hashes it afresh), then, with the
// connection still open, finds the process that accepted it. ours is true
// when one of pids holds the connection's server socket; err is then the
// answer's failure (nil for a 2xx, a *statusError, a transport error).
// When another process accepted it, ours is false and err wraps
// errOtherInstance. A failure before any process accepted (nothing
// listens, no answer) is err with ours false.
//
// The server socket is looked up in the network namespace of pids (the
// component's, which a caller inside the node's namespace shares): the
// socket whose local address is the server's and remote address ours
// (serverInode) gives an inode, and a process holds the connection when
// one of its fds links to socket:[inode].
func (s *Scanner) answeredBy(ctx context.Context, rawURL string, pids []int) (ours bool, err error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return false, fmt.Errorf("health endpoint %q is not an http(s) URL", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"https": "443", "http": "80"}[u.Scheme])
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", host)
	if err != nil {
		return false, err
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	answer := ask(ctx, raw, u)
	// The request is answered (or failed) and the connection still open:
	// keep-alive, so the server holds its socket until we close ours.
	server, err1 := netip.ParseAddrPort(raw.RemoteAddr().String())
	client, err2 := netip.ParseAddrPort(raw.LocalAddr().String())
	if err := errors.Join(err1, err2); err != nil {
		return false, fmt.Errorf("addresses of the health connection: %w", err)
	}
	held, err := s.holdsConn(pids, server, client)
	switch {
	case err != nil && answer != nil:
		// Whose failure it was is unknown: say both.
		return false, fmt.Errorf("%w (the answer: %w)", err, answer)
	case err != nil:
		return false, err
	case !held:
		return false, fmt.Errorf("%w (no fd of pids %v holds the connection from %s)", errOtherInstance, pids, client)
	}
	return true, answer
}

// ask sends one keep-alive GET for u over c (TLS for https, with the
// health probes' configuration) and judges the answer.
func ask(ctx context.Context, c net.Conn, u *url.URL) error {
	if u.Scheme == "https" {
		tc := tls.Client(c, healthTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return err
		}
		c = tc
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if err := req.Write(c); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = judge(resp)
	// judge reads what it needs; whatever is left would reset the
	// connection at close, which the component may log.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	return err
}

// holdsConn reports whether one of pids holds the server socket of the
// TCP connection between server and client, looked up in the network
// namespace of the first of pids whose table can be read. It is an error
// (wrapping errUnattributed) when no such socket is there: the connection
// is in another namespace, or the server closed its side before the look.
func (s *Scanner) holdsConn(pids []int, server, client netip.AddrPort) (bool, error) {
	var (
		inode uint64
		found bool
		err   error
	)
	for _, pid := range pids {
		inode, found, err = s.serverInode(pid, server, client)
		if isGone(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("find the health connection's socket: %w", err)
		}
		break
	}
	if !found {
		return false, fmt.Errorf("%w: no open server socket for the connection from %s in the network namespace of pids %v", errUnattributed, client, pids)
	}
	want := []byte("socket:[" + strconv.FormatUint(inode, 10) + "]")
	buf := make([]byte, 64)
	for _, pid := range pids {
		held, err := s.holdsFD(pid, want, buf)
		if err != nil {
			return false, err
		}
		if held {
			return true, nil
		}
	}
	return false, nil
}

// serverInode finds, in <root>/<pid>/net/tcp then tcp6, the socket whose
// local address is server and remote address client, and returns its
// inode. A match with inode 0 (a socket no fd holds any more: closed,
// still in the kernel's table) is not found.
//
// In this process's own network namespace the kernel is asked directly
// (diagInode), which is far cheaper; the table is the fallback.
func (s *Scanner) serverInode(pid int, server, client netip.AddrPort) (uint64, bool, error) {
	if s.sameNetns(pid) {
		inode, found, err := diagInode(server, client)
		if !errors.Is(err, errNoSockDiag) {
			return inode, found && inode != 0, err
		}
	}
	return s.tableInode(pid, server, client)
}

// tableInode is serverInode from <root>/<pid>/net/tcp and tcp6.
func (s *Scanner) tableInode(pid int, server, client netip.AddrPort) (uint64, bool, error) {
	server = netip.AddrPortFrom(server.Addr().Unmap(), server.Port())
	client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
	for _, table := range []string{"tcp", "tcp6"} {
		if table == "tcp" && !(server.Addr().Is4() && client.Addr().Is4()) {
			continue
		}
		needle := []byte(" " + procAddr(server, table == "tcp6") + " " + procAddr(client, table == "tcp6") + " ")
		inode, found, err := scanTable(s.pidFile(pid, "net/"+table), needle)
		if err != nil || found {
			return inode, found && inode != 0, err
		}
	}
	return 0, false, nil
}

// scanTable reads a /proc/net/tcp-style file line by line until a line
// holds needle (" local remote "), and returns that line's inode (the
// seventh field after the addresses). It stops at the match: the kernel
// writes the table as it is read, so the rest is never made.
func scanTable(name string, needle []byte) (uint64, bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 16<<10)
	for {
		line, err := r.ReadSlice('\n')
		if i := bytes.Index(line, needle); i >= 0 {
			fields := bytes.Fields(line[i+len(needle):])
			if len(fields) < 7 {
				return 0, false, fmt.Errorf("%s: short line %q", name, line)
			}
			inode, perr := strconv.ParseUint(string(fields[6]), 10, 64)
			if perr != nil {
				return 0, false, fmt.Errorf("%s: inode of line %q: %w", name, line, perr)
			}
			return inode, true, nil
		}
		switch {
		case err == io.EOF:
			return 0, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			// A line longer than the buffer is not one of the table's.
			continue
		case err != nil:
			return 0, false, fmt.Errorf("read %s: %w", name, err)
		}
	}
}

// procAddr writes a as /proc/net/tcp (4 bytes) or tcp6 (16, an IPv4
// address v4-mapped) does: each 32-bit word of the address as the host
// reads it from memory, in upper-case hex, then ':' and the port in hex.
func procAddr(a netip.AddrPort, six bool) string {
	var b []byte
	if six {
		s := a.Addr().As16()
		b = s[:]
	} else {
		s := a.Addr().As4()
		b = s[:]
	}
	out := make([]byte, 0, 2*len(b)+5)
	for i := 0; i < len(b); i += 4 {
		out = fmt.Appendf(out, "%08X", binary.NativeEndian.Uint32(b[i:]))
	}
	return string(fmt.Appendf(out, ":%04X", a.Port()))
}

// holdsFD reports whether one of pid's fds links to want ("socket:[N]").
// A process that is gone holds nothing; an fd closed mid-scan is skipped.
func (s *Scanner) holdsFD(pid int, want, buf []byte) (bool, error) {
	dir := s.pidFile(pid, "fd")
	d, err := os.Open(dir)
	if isGone(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("fds of pid %d: %w", pid, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		if isGone(err) {
			return false, nil
		}
		return false, fmt.Errorf("fds of pid %d: %w", pid, err)
	}
	for _, n := range names {
		m, err := unix.Readlink(dir+"/"+n, buf)
		if err != nil {
			if isGone(err) {
				continue
			}
			return false, fmt.Errorf("fd %s of pid %d: %w", n, pid, err)
		}
		if bytes.Equal(buf[:m], want) {
			return true, nil
		}
	}
	return false, nil
}

// pidsOf is the pids of ps.
func pidsOf(ps []Process) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}
