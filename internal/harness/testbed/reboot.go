package testbed

// This file reboots a node: every process dies at once, then the kubelet stand-in starts again.

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/proc"
)

// RebootTimeout bounds each wait of Reboot when it is given none: every
// process of the node gone, the new stand-in serving.
const RebootTimeout = 30 * time.Second

// Reboot simulates a power loss and the boot after it. Every process of
// the node (the kubelet stand-in and every pod: every process carrying
// MarkerEnv) is SIGKILLed at once, and when none is left the kubelet
// stand-in starts again over the same root, manifest directory, image map,
// ports and timings. Like kubelet at boot, it starts every pod from the
// manifests on disk; etcd starts on its data directory. Reboot returns as
// soon as the stand-in serves, without waiting for any pod (WaitActive
// does); a manifest may hold a component that never becomes active.
//
// It returns the new boot's id, a random one in the kernel's format, which
// differs from the kernel's and from every earlier one: pass it to
// stratum-upgrade in its environment (runbin.WithBootID), as the kernel
// would tell it after a real reboot. KubeletPID, Kubelet, Scanner and Store
// follow the new stand-in; Scanner and Store report the new boot id. A
// stratum-upgrade the test started is the test's to kill (it carries no
// marker). timeout bounds each wait (0: RebootTimeout). Reboot must not run
// concurrently with Stop or another Reboot.
func (n *Node) Reboot(timeout time.Duration) (string, error) {
	if timeout <= 0 {
		timeout = RebootTimeout
	}
	if n.cmd == nil {
		return "", fmt.Errorf("testbed reboot: the node's kubelet stand-in was never started")
	}
	if _, err := n.killLeftovers(timeout); err != nil {
		return "", fmt.Errorf("testbed reboot: waiting for the kubelet stand-in and every pod of %s to die: %w", n.Root, err)
	}
	select {
	case <-n.exited:
	case <-time.After(timeout):
		return "", fmt.Errorf("testbed reboot: the killed kubelet stand-in (pid %d) was not reaped within %s", n.KubeletPID, timeout)
	}
	// A reboot leaves no cgroup of the old boot.
	if err := n.clearCgroups(false); err != nil {
		return "", fmt.Errorf("testbed reboot: %w", err)
	}
	id, err := newBootID()
	if err != nil {
		return "", err
	}
	// The new stand-in writes its own status address; the old one's must
	// not be taken for it.
	if err := os.Remove(filepath.Join(n.KubeletDir, kubeletsim.StatusAddrFile)); err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("testbed reboot: %w", err)
	}
	if f, err := os.OpenFile(n.KubeletLog, os.O_WRONLY|os.O_APPEND, 0); err == nil {
		fmt.Fprintf(f, "=== testbed: reboot at %s, boot id %s: every process was SIGKILLed; the stand-in starts again\n", time.Now().Format(time.RFC3339Nano), id)
		f.Close()
	}
	opts := n.kubeletOpts
	if err := n.startKubelet(n.kubeletBin, opts); err != nil {
		return "", fmt.Errorf("testbed reboot: %w", err)
	}
	n.Scanner = proc.Host().Within(n.KubeletPID).WithBootID(id)
	if n.Store, err = manifest.Open(n.ManifestDir, manifest.Options{Scanner: n.Scanner, Logger: n.log}); err != nil {
		return "", fmt.Errorf("testbed reboot: %w", err)
	}
	n.log.Info("testbed node rebooted", "root", n.Root, "bootID", id, "kubelet", n.KubeletPID)
	return id, nil
}

// newBootID is a random boot id, formatted as the kernel's
// /proc/sys/kernel/random/boot_id (a version 4 UUID).
func newBootID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("testbed reboot: boot id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
