package realcluster

// A node's daemons stopped and started the way the scenarios need: a
// kubelet restarted (k/k#140257), and a whole node crashing and booting
// again (its files kept, every process gone).

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/e2e"
)

// Kill SIGKILLs daemon name of the node and waits until it is gone.
func (n *Node) Kill(name string) error {
	d := n.daemons[name]
	if d == nil || !d.alive() {
		return fmt.Errorf("real cluster: node %s: %s does not run", n.Name, name)
	}
	d.signal(syscall.SIGKILL)
	select {
	case <-d.exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("real cluster: node %s: %s (pid %d) still runs 30 s after SIGKILL", n.Name, name, d.PID())
	}
}

// StartAgain starts daemon name with the command line it last ran with.
func (n *Node) StartAgain(name string) error {
	d := n.daemons[name]
	if d == nil {
		return fmt.Errorf("real cluster: node %s: %s never ran", n.Name, name)
	}
	return n.Start(name, d.argv...)
}

// RestartKubelet stops the kubelet as systemctl restart would (SIGTERM,
// then SIGKILL after 10 s) and starts it again; the pods it ran keep
// running meanwhile, as they do under a real kubelet restart.
func (n *Node) RestartKubelet() error {
	d := n.daemons["kubelet"]
	if d == nil || !d.alive() {
		return fmt.Errorf("real cluster: node %s: kubelet does not run", n.Name)
	}
	d.stop(10 * time.Second)
	return n.StartAgain("kubelet")
}

// Crash ends every process of the node at once with SIGKILL, as losing
// power would (its files stay; the page cache is the host's, so nothing
// written is lost): the daemons, the shims and the containers. Only the
// node's init stays, which keeps its namespaces.
func (n *Node) Crash() error {
	initPID, outer := n.HolderPID(), n.holder.cmd.Process.Pid
	for i := 0; i < 100; i++ {
		left := 0
		for _, p := range n.PIDs() {
			// The init's own sleep is started again every second: it is
			// the init, not a process of the node's.
			if p == initPID || p == outer || (e2e.ParentOf(p) == initPID && comm(p) == "sleep") {
				continue
			}
			left++
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if left == 0 {
			for _, d := range n.daemons {
				<-d.exited
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("real cluster: node %s: processes still there 10 s after SIGKILL: %v", n.Name, n.PIDs())
}

// Boot starts what a node's boot starts: containerd, then the kubelet
// with the command line it last ran with (kubelet then starts the static
// pods from the manifests, as after a real boot).
func (n *Node) Boot(ctx context.Context) error {
	if err := n.StartAgain("containerd"); err != nil {
		return err
	}
	if err := waitFor(ctx, "node "+n.Name+"'s containerd to answer", 30*time.Second, func() (bool, error) {
		if !n.Alive("containerd") {
			return false, fmt.Errorf("containerd exited: %s", tail(n.Log("containerd"), 20))
		}
		_, err := os.Stat(n.ContainerdSock)
		return err == nil && n.ctrAnswers(ctx), nil
	}); err != nil {
		return err
	}
	return n.StartAgain("kubelet")
}

// comm is pid's command name, "" when it is gone.
func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
