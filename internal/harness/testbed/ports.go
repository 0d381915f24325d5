package testbed

// This file hands out the TCP ports of the test bed's nodes.

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// handedOut is every port FreePorts returned in this process: nodes started
// in parallel (the crash matrix) never get the same port, even when the
// kernel offers a port again after the first node's check released it.
// claims holds open the claim of each (claimPort).
var handedOut = struct {
	sync.Mutex
	ports  map[int]bool
	claims []net.Listener
}{ports: map[int]bool{}}

// kubeadmPorts are the ports kubeadm's manifests pin for want of a
// --secure-port (kube-controller-manager's 10257, kube-scheduler's
// 10259): the adoption tests run those manifests as kubeadm wrote them,
// so no other node may be given one.
var kubeadmPorts = map[int]bool{10257: true, 10259: true}

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
		if handedOut.ports[port] || kubeadmPorts[port] {
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

// claimPort claims port for this process's life: it listens on the
// abstract unix socket @stratum-testbed-port-<port>, a name the kernel
// gives to one socket at a time in the network namespace (every user's
// processes alike) and frees when the process ends, however it ends; no
// file is left anywhere. It returns the listener (to be kept open), nil
// when another process holds the claim, or an error when claims cannot be
// made here at all.
func claimPort(port int) (net.Listener, error) {
	l, err := net.Listen("unix", "@stratum-testbed-port-"+strconv.Itoa(port))
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: claim port %d: %w", port, err)
	}
	return l, nil
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

// HoldPorts waits until no other test (in this process or another) holds
// any of ports through HoldPorts, holds them for the rest of t, and fails
// t after timeout. It is for ports a test cannot choose (kubeadm's
// kubeadmPorts): FreePorts never hands those out, so only the tests that
// hold them contend for them, one at a time.
func HoldPorts(t TB, timeout time.Duration, ports ...int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, port := range ports {
		for {
			l, err := claimPort(port)
			if err != nil {
				t.Fatalf("%v", err)
			}
			if l != nil {
				t.Cleanup(func() { l.Close() })
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testbed: port %d: another test held it for over %s", port, timeout)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
