package proc

// The inode of one TCP socket by its addresses, asked of the kernel's
// sock_diag netlink interface: an exact lookup that costs microseconds,
// where /proc/<pid>/net/tcp walks every bucket of the kernel's socket hash
// tables (about 0.7 ms even with a handful of sockets).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// inet_diag's constants and layout (linux/inet_diag.h, linux/sock_diag.h).
const (
	inetDiagReqLen = 56         // struct inet_diag_req_v2
	inetDiagMsgLen = 72         // struct inet_diag_msg
	inetDiagNoCook = ^uint32(0) // INET_DIAG_NOCOOKIE
	tcpListen      = 10         // TCP_LISTEN
)

// errNoSockDiag means the lookup cannot be made here (sock_diag refused,
// or a network namespace other than this process's): the caller reads the
// /proc/net tables instead.
var errNoSockDiag = errors.New("sock_diag not usable")

// sameNetns reports whether pid's network namespace is this process's: the
// only one a netlink socket this process opens can ask about.
func (s *Scanner) sameNetns(pid int) bool {
	if !s.live {
		return false
	}
	var mine, theirs unix.Stat_t
	if unix.Stat("/proc/self/ns/net", &mine) != nil || unix.Stat(s.pidFile(pid, "ns/net"), &theirs) != nil {
		return false
	}
	return mine.Dev == theirs.Dev && mine.Ino == theirs.Ino
}

// diagInode asks sock_diag for the TCP socket whose local address is local
// and remote address remote, in this process's network namespace, and
// returns its inode (0 when no fd holds it any more). found is false when
// there is no such connected socket: the kernel's exact lookup falls back
// to a listener, which is checked for and not taken. An error wraps
// errNoSockDiag when the interface cannot answer.
func diagInode(local, remote netip.AddrPort) (inode uint64, found bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %w", errNoSockDiag, os.NewSyscallError("socket", err))
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(requestTimeout))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	families := []uint8{unix.AF_INET6}
	if local.Addr().Is4() && remote.Addr().Is4() {
		// A socket of a dual-stack listener holds an IPv4 connection as
		// v4-mapped IPv6: the AF_INET6 lookup of mapped addresses finds it.
		families = []uint8{unix.AF_INET, unix.AF_INET6}
	}
	buf := make([]byte, 8192)
	for _, fam := range families {
		req := diagRequest(fam, local, remote)
		if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return 0, false, fmt.Errorf("%w: %w", errNoSockDiag, os.NewSyscallError("sendto", err))
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, false, fmt.Errorf("%w: %w", errNoSockDiag, os.NewSyscallError("recvfrom", err))
		}
		inode, found, err := parseDiag(buf[:n], remote.Port())
		if err != nil || found {
			return inode, found, err
		}
	}
	return 0, false, nil
}

// diagRequest is a netlink message asking for the one socket of family
// fam whose local and remote addresses are local and remote.
func diagRequest(fam uint8, local, remote netip.AddrPort) []byte {
	msg := make([]byte, unix.SizeofNlMsghdr+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	r := msg[unix.SizeofNlMsghdr:]
	r[0], r[1] = fam, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	putAddr(id[4:20], local.Addr(), fam)
	putAddr(id[20:36], remote.Addr(), fam)
	ne.PutUint32(id[40:], inetDiagNoCook)
	ne.PutUint32(id[44:], inetDiagNoCook)
	return msg
}

func putAddr(dst []byte, a netip.Addr, fam uint8) {
	if fam == unix.AF_INET {
		b := a.As4()
		copy(dst, b[:])
		return
	}
	b := a.As16()
	copy(dst, b[:])
}

// parseDiag reads the answer to diagRequest: the socket's inode when it is
// a connected socket to port remotePort, not found for ENOENT or a
// listener.
func parseDiag(b []byte, remotePort uint16) (uint64, bool, error) {
	ne := binary.NativeEndian
	if len(b) < unix.SizeofNlMsghdr {
		return 0, false, fmt.Errorf("%w: short answer", errNoSockDiag)
	}
	body := b[unix.SizeofNlMsghdr:min(len(b), int(ne.Uint32(b)))]
	switch ne.Uint16(b[4:]) {
	case unix.NLMSG_ERROR:
		if len(body) < 4 {
			return 0, false, fmt.Errorf("%w: short error", errNoSockDiag)
		}
		errno := unix.Errno(-int32(ne.Uint32(body)))
		if errno == unix.ENOENT {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("%w: %w", errNoSockDiag, errno)
	case unix.SOCK_DIAG_BY_FAMILY:
		if len(body) < inetDiagMsgLen {
			return 0, false, fmt.Errorf("%w: short socket message", errNoSockDiag)
		}
		state, dport := body[1], binary.BigEndian.Uint16(body[6:])
		if state == tcpListen || dport != remotePort {
			return 0, false, nil
		}
		return uint64(ne.Uint32(body[68:])), true, nil
	}
	return 0, false, fmt.Errorf("%w: unexpected message type %d", errNoSockDiag, ne.Uint16(b[4:]))
}
