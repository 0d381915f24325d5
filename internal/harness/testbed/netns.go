package testbed

// This file runs one node of a cluster in a network namespace of its own
// (Options.NetNSNode), so that a test can cut it off from the others.
//
// The layout, made with iproute2 and removed by Cluster.Stop:
//
//	root namespace                         namespace NetNSName
//	strat-br0 (bridge)  <- strat-vh0 ==veth== strat-vn0
//	  NetNSAddress(i) of every other node      NetNSAddress(n), lo up
//
// Every node's address is then NetNSAddress(i), so the other nodes reach
// the namespaced one over the veth and it reaches them; Cut takes the
// root end of the veth down, Restore up again. The namespaced node's
// kubelet stand-in runs under `ip netns exec`, so every pod it starts is
// inside. Its loopback listeners (etcd's client and metrics listeners, the
// component stand-ins, which listen on loopback only) are reached from the
// test's own namespace through forwarders on 127.0.0.1 at the same ports,
// each connection dialled inside the namespace (setns on a locked
// thread): Node.Scanner, EtcdEndpoint and etcddata.Endpoint work for it as
// for any node. The forwarders follow Cut: while the node is cut off,
// they refuse (a health check from this namespace sees it down, as a load
// balancer would). The kubelet stand-in's status endpoint is dialled inside
// the namespace directly, cut or not (the test's console, not the network).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The names of what Options.NetNSNode creates. They are fixed: a cluster
// with a namespaced node must not run alongside another (the tests that
// start one run under make ha, one at a time), and setup first removes
// whatever a killed test left of them.
const (
	NetNSName   = "strat-ns"
	NetNSBridge = "strat-br0"
	netnsHost   = "strat-vh0" // the veth's root end, on the bridge
	netnsPeer   = "strat-vn0" // its namespace end
)

// NetNSAddress is the address of node i (1-based) of a cluster with a
// namespaced node: 10.251.0.(10+i) on NetNSBridge's 10.251.0.0/24.
func NetNSAddress(i int) string { return "10.251.0." + strconv.Itoa(10+i) }

// NetNSSupported is nil when Options.NetNSNode can work here: root, and
// iproute2's ip with network namespaces. Otherwise it says why (a test
// skips with it).
func NetNSSupported() error {
	if os.Geteuid() != 0 {
		return errors.New("a network namespace needs root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return errors.New("iproute2's ip is not installed (apt-get install iproute2)")
	}
	if out, err := exec.Command(ip, "netns", "list").CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns list: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netns is the namespace of a cluster's namespaced node.
type netns struct {
	ip      string // iproute2's ip
	address string // the node's address inside
	cut     atomic.Bool

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]bool
	wg        sync.WaitGroup
}

// run runs ip with args, its output in the error.
func (ns *netns) run(args ...string) error {
	out, err := exec.Command(ns.ip, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setupNetNS makes the bridge with the addresses of every node but the
// namespaced one (number self of n), the namespace and the veth. On error
// whatever it made is removed.
func setupNetNS(n, self int) (*netns, error) {
	if err := NetNSSupported(); err != nil {
		return nil, fmt.Errorf("testbed: Options.NetNSNode: %w", err)
	}
	ip, _ := exec.LookPath("ip")
	ns := &netns{ip: ip, address: NetNSAddress(self), conns: map[net.Conn]bool{}}
	ns.remove() // what a killed test left
	steps := [][]string{
		{"link", "add", NetNSBridge, "type", "bridge"},
		{"link", "set", NetNSBridge, "up"},
		{"netns", "add", NetNSName},
		{"link", "add", netnsHost, "type", "veth", "peer", "name", netnsPeer},
		{"link", "set", netnsPeer, "netns", NetNSName},
		{"link", "set", netnsHost, "master", NetNSBridge},
		{"link", "set", netnsHost, "up"},
		{"-n", NetNSName, "link", "set", "lo", "up"},
		{"-n", NetNSName, "addr", "add", ns.address + "/24", "dev", netnsPeer},
		{"-n", NetNSName, "link", "set", netnsPeer, "up"},
	}
	for i := 1; i <= n; i++ {
		if i != self {
			steps = append(steps, []string{"addr", "add", NetNSAddress(i) + "/24", "dev", NetNSBridge})
		}
	}
	for _, s := range steps {
		if err := ns.run(s...); err != nil {
			ns.remove()
			return nil, fmt.Errorf("testbed: network namespace: %w", err)
		}
	}
	return ns, nil
}

// remove deletes the namespace (and the veth with it) and the bridge;
// what is already gone is no error.
func (ns *netns) remove() error {
	var errs []error
	for _, s := range [][]string{{"netns", "del", NetNSName}, {"link", "del", netnsHost}, {"link", "del", NetNSBridge}} {
		if err := ns.run(s...); err != nil && !strings.Contains(err.Error(), "No such file") && !strings.Contains(err.Error(), "Cannot find device") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close stops the forwarders and removes the network.
func (ns *netns) close() error {
	ns.mu.Lock()
	for _, l := range ns.listeners {
		l.Close()
	}
	ns.listeners = nil
	for c := range ns.conns {
		c.Close()
	}
	ns.mu.Unlock()
	ns.wg.Wait()
	return ns.remove()
}

// command is name with args run inside the namespace.
func (ns *netns) command(name string, args ...string) *exec.Cmd {
	return exec.Command(ns.ip, append([]string{"netns", "exec", NetNSName, name}, args...)...)
}

// dial connects to addr (an IP literal and port) from inside the
// namespace: the socket is made on a thread moved into it, and keeps
// belonging to it wherever it is used.
func (ns *netns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// The thread goes back to the scheduler only in the namespace it
		// came from; otherwise it dies with this goroutine.
		back := false
		defer func() {
			if back {
				runtime.UnlockOSThread()
			}
		}()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			back = true
			ch <- result{nil, err}
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + NetNSName)
		if err != nil {
			back = true
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			back = true
			ch <- result{nil, fmt.Errorf("setns %s: %w", NetNSName, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		back = unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// forward makes 127.0.0.1:port of this namespace reach 127.0.0.1:port
// inside the node's, while the node is not cut off.
func (ns *netns) forward(port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("testbed: forwarder: %w", err)
	}
	ns.mu.Lock()
	ns.listeners = append(ns.listeners, l)
	ns.mu.Unlock()
	ns.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if ns.cut.Load() {
				c.Close()
				continue
			}
			ns.wg.Go(func() { ns.pipe(c, addr) })
		}
	})
	return nil
}

func (ns *netns) track(c net.Conn, on bool) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if on {
		ns.conns[c] = true
	} else {
		delete(ns.conns, c)
	}
}

// pipe copies between c and a connection to addr inside the namespace.
func (ns *netns) pipe(c net.Conn, addr string) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), RebootTimeout)
	in, err := ns.dial(ctx, "tcp", addr)
	cancel()
	if err != nil {
		return
	}
	defer in.Close()
	ns.track(c, true)
	ns.track(in, true)
	defer ns.track(c, false)
	defer ns.track(in, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(in, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, in); done <- struct{}{} }()
	<-done
}

// setCut takes the veth's root end down (cut) or up, and makes the
// forwarders follow.
func (ns *netns) setCut(cut bool) error {
	state := "up"
	if cut {
		state = "down"
	}
	ns.cut.Store(cut)
	if cut {
		ns.mu.Lock()
		for c := range ns.conns {
			c.Close()
		}
		ns.mu.Unlock()
	}
	return ns.run("link", "set", netnsHost, state)
}

// Cut cuts the namespaced node off: the other nodes and the test's own
// namespace no longer reach it, nor it them (its own loopback and address
// still answer inside). Established connections are not reset: their
// packets are lost until Restore. It is an error on any other node.
func (n *Node) Cut() error {
	if n.netns == nil {
		return fmt.Errorf("testbed: %s has no network namespace (Options.NetNSNode)", n.State.NodeName)
	}
	n.log.Info("testbed node cut off")
	return n.netns.setCut(true)
}

// Restore undoes Cut.
func (n *Node) Restore() error {
	if n.netns == nil {
		return fmt.Errorf("testbed: %s has no network namespace (Options.NetNSNode)", n.State.NodeName)
	}
	n.log.Info("testbed node link restored")
	return n.netns.setCut(false)
}

// NetNS is the name of the node's network namespace ("" when it runs in
// the test's).
func (n *Node) NetNS() string {
	if n.netns == nil {
		return ""
	}
	return NetNSName
}

// Command is exec.Command(name, args...) run where the node's processes
// run: inside its network namespace, if it has one (`ip netns exec`, which
// executes name in place: the process's pid is the command's).
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	if n.netns == nil {
		return exec.Command(name, args...)
	}
	return n.netns.command(name, args...)
}
