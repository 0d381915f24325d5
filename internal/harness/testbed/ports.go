package testbed

// This file hands out the TCP ports of the test bed's nodes.

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// handedOut is every port FreePorts returned in this process: nodes started
// in parallel (the crash matrix) never get the same port, even when the
// kernel offers a port again after the first node's check released it.
// claims holds open the claim file of each (claimPort).
var handedOut = struct {
	sync.Mutex
	ports  map[int]bool
	claims []*os.File
}{ports: map[int]bool{}}

// portRangeOf is portRange; a test narrows it.
var portRangeOf = portRange

// FreePorts returns n distinct free TCP ports on 127.0.0.1, none returned
// before in this process nor, while that process lives, in another test
// process on this machine (claimPort): go test runs packages in parallel,
// and a port is free between FreePorts' check and the component's bind,
// and again while kubelet restarts the component. A process that is not
// one of ours may still take one.
//
// The ports are picked below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port the kernel handed out for a
// listen on :0 is in that range, and so is the local port of every
// outgoing connection, so with dozens of nodes probing each other one of
// those connections took an etcd port between the check and etcd's bind
// (etcd then exits 1 with "address already in use", seen in CI).
func FreePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	lo, hi := portRangeOf()
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("testbed: free port: no free port in %d-%d after %d tries", lo, hi, tries)
		}
		port := lo + mrand.IntN(hi-lo)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken by somebody else
		}
		lns = append(lns, l) // held open until return
		claim, err := claimPort(port)
		if err != nil {
			return nil, err
		}
		if claim == nil {
			continue // another test process has it
		}
		handedOut.claims = append(handedOut.claims, claim)
		handedOut.ports[port] = true
		out = append(out, port)
	}
	return out, nil
}

// claimDir holds one claim file per port handed out on this machine.
func claimDir() string { return filepath.Join(os.TempDir(), "stratum-testbed-ports") }

// claimPort claims port for this process's life: an exclusive flock on
// <claimDir>/<port>, which the kernel releases when the process ends,
// however it ends. It returns the open file (to be kept open), nil when
// another process holds the claim, or an error when claims cannot be made
// here at all.
func claimPort(port int) (*os.File, error) {
	dir := claimDir()
	if err := os.Mkdir(dir, 0o755); err == nil {
		// Everyone's, like /tmp: root and a contributor's user both claim.
		if err := os.Chmod(dir, 0o1777); err != nil {
			return nil, fmt.Errorf("testbed: port claims: %w", err)
		}
	} else if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("testbed: port claims: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDONLY|os.O_CREATE, 0o644)
	if errors.Is(err, os.ErrPermission) {
		return nil, nil // another user's file: its claim cannot be told, so treat it as taken
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: port claims: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("testbed: port claims: flock %s: %w", f.Name(), err)
	}
	return f, nil
}

// portRange is the range FreePorts picks from: [10000, the start of the
// ephemeral range), or 20000-30000 when that range cannot be read or
// starts too low to leave room.
func portRange() (lo, hi int) {
	lo, hi = 20000, 30000
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first < 12000 {
		return lo, hi
	}
	return 10000, first
}
