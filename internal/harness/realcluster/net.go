package realcluster

// The network: one bridge in the root namespace carrying BridgeAddress,
// and per node a network namespace joined to it by a veth, made and
// removed with iproute2's ip. The names are fixed (one cluster at a time,
// under Lock) and apart from testbed's (strat-*, 10.251.0.0/24), so make
// ha can run beside.

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

const (
	// Bridge is the bridge every node's veth is on.
	Bridge = "rc-br0"
	// BridgeAddress is the root namespace's address on Bridge: the test
	// reaches the nodes, and they reach the image registry, through it.
	BridgeAddress = "10.252.0.1"
	// MaxNodes bounds the node numbers, so a stale cleanup knows every name.
	MaxNodes = 5
)

// NodeName is node i's name (1-based): "cp-1".
func NodeName(i int) string { return "cp-" + strconv.Itoa(i) }

// NodeAddress is node i's address on Bridge: 10.252.0.(10+i).
func NodeAddress(i int) string { return "10.252.0." + strconv.Itoa(10+i) }

// NetNS is node i's network namespace: "rc-cp1".
func NetNS(i int) string { return "rc-cp" + strconv.Itoa(i) }

func vethHost(i int) string { return "rc-vh" + strconv.Itoa(i) }

// ip runs iproute2's ip with args, its output in the error.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// gone reports whether err is ip's "it is not there".
func gone(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "No such file") || strings.Contains(err.Error(), "Cannot find device") ||
		strings.Contains(err.Error(), "does not exist"))
}

// addBridge makes Bridge with BridgeAddress, up.
func addBridge() error {
	for _, s := range [][]string{
		{"link", "add", Bridge, "type", "bridge"},
		{"addr", "add", BridgeAddress + "/24", "dev", Bridge},
		{"link", "set", Bridge, "up"},
	} {
		if err := ip(s...); err != nil {
			return fmt.Errorf("real cluster: bridge: %w", err)
		}
	}
	return nil
}

// addNetNS makes node i's namespace, its loopback up, and a veth from it
// to Bridge carrying NodeAddress(i) inside (as eth0).
func addNetNS(i int) error {
	ns, vh := NetNS(i), vethHost(i)
	for _, s := range [][]string{
		{"netns", "add", ns},
		{"link", "add", vh, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", vh, "master", Bridge},
		{"link", "set", vh, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", NodeAddress(i) + "/24", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", BridgeAddress},
	} {
		if err := ip(s...); err != nil {
			return fmt.Errorf("real cluster: node %s network: %w", NodeName(i), err)
		}
	}
	return nil
}

// delNetNS removes node i's namespace (its veth goes with it); what is
// already gone is no error. The namespace's processes must be gone first.
func delNetNS(i int) error {
	var errs []error
	for _, s := range [][]string{{"netns", "del", NetNS(i)}, {"link", "del", vethHost(i)}} {
		if err := ip(s...); err != nil && !gone(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// delBridge removes Bridge; gone already is no error.
func delBridge() error {
	if err := ip("link", "del", Bridge); err != nil && !gone(err) {
		return err
	}
	return nil
}

// netnsPIDs lists the processes in network namespace name (ip netns pids).
func netnsPIDs(name string) []int {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}
