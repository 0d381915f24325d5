package realcluster

// Teardown: every process of a node is found by its network namespace
// (every pod is hostNetwork), so nothing is killed by name; the node's
// mounts die with its holder's mount namespace; its cgroups are its own
// cgroup root. cleanStale does the same from the fixed names for a run
// that was killed before it could.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop tears the cluster down, also after a failed Start: each node's
// kubelet first (so it restarts nothing), then every process in its
// network namespace, its cgroups and namespace; then the registry, the
// bridge, the mount points made on the host and Dir. It returns every
// problem met (nil when clean). Calling it again returns the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		if c.sigs != nil {
			signal.Stop(c.sigs)
			close(c.sigs)
		}
		var errs []error
		for i := len(c.Nodes) - 1; i >= 0; i-- {
			errs = append(errs, c.Nodes[i].stop())
		}
		if c.lb != nil {
			c.lb.close()
		}
		if c.registry != nil {
			c.registry.stop(10 * time.Second)
		}
		errs = append(errs, delBridge(), removeCreated(c.Dir), os.RemoveAll(c.Dir))
		c.unlock()
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// stop ends every process of the node and removes its cgroups and
// network namespace.
func (n *Node) stop() error {
	if d := n.daemons["kubelet"]; d != nil {
		d.stop(10 * time.Second)
	}
	var errs []error
	if err := killNetNS(n.NetNS); err != nil {
		errs = append(errs, err)
	}
	for _, d := range n.daemons {
		<-d.exited
	}
	if n.holder != nil {
		<-n.holder.exited
	}
	errs = append(errs, removeCgroup(n.CgroupRoot), delNetNS(n.Index))
	return errors.Join(errs...)
}

// killNetNS SIGKILLs every process in network namespace name until none
// is left (a shim may start a process while its siblings die).
func killNetNS(name string) error {
	for i := 0; i < 100; i++ {
		pids := netnsPIDs(name)
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("real cluster: processes still in network namespace %s after 10 s: %v", name, netnsPIDs(name))
}

// cleanStale undoes what a killed run left in dir and under the fixed
// names: processes in the nodes' namespaces, cgroups, namespaces, the
// registry (its command line names dir), the bridge, the mount points
// recorded beside dir, and dir.
func cleanStale(dir string) error {
	var errs []error
	for i := 1; i <= MaxNodes; i++ {
		errs = append(errs, killNetNS(NetNS(i)), removeCgroup("/stratum-rc-"+NodeName(i)), delNetNS(i))
	}
	for _, p := range processesWith(dir) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	errs = append(errs, delBridge(), removeCreated(dir), os.RemoveAll(dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("real cluster: cleaning up an earlier run: %w", err)
	}
	return nil
}

// removeCreated removes the mount points recorded beside dir, and the
// record.
func removeCreated(dir string) error {
	b, err := os.ReadFile(createdRecord(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, p := range strings.Fields(string(b)) {
		errs = append(errs, os.RemoveAll(p))
	}
	errs = append(errs, os.Remove(createdRecord(dir)))
	return errors.Join(errs...)
}

// cgroupDirs are root's directories, one per mounted hierarchy (a
// hierarchy mounted under two names counted once).
func cgroupDirs(root string) []string {
	hs, _ := filepath.Glob("/sys/fs/cgroup/*")
	seen := map[string]bool{}
	var out []string
	for _, h := range hs {
		real, err := filepath.EvalSymlinks(h)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		out = append(out, filepath.Join(real, root))
	}
	return out
}

// makeCgroup makes cgroup root in every hierarchy: kubelet refuses a
// cgroupRoot that does not exist.
func makeCgroup(root string) error {
	for _, d := range cgroupDirs(root) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("real cluster: cgroup %s: %w", d, err)
		}
	}
	return nil
}

// removeCgroup removes cgroup root and everything under it in every
// hierarchy, leaves first, retrying while the kernel still counts the
// killed processes in them.
func removeCgroup(root string) error {
	var left []string
	for try := 0; try < 50; try++ {
		left = nil
		for _, top := range cgroupDirs(root) {
			var dirs []string
			_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
			for _, d := range dirs {
				if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("real cluster: cgroups not removed: %v", left)
}

// processesWith lists live processes (not this one) whose command line
// contains s.
func processesWith(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, pid)
		}
	}
	return out
}

// Leftovers lists what of a cluster in dir is still on the machine after
// Stop: network namespaces and the bridge, processes in them or naming
// dir, cgroups, mounts under dir (in any process's view), dir itself and
// the recorded mount points. Empty when the teardown was complete.
func Leftovers(dir string) []string {
	var out []string
	if b, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "rc-") {
				out = append(out, "network namespace "+l)
			}
		}
	}
	if exec.Command("ip", "link", "show", Bridge).Run() == nil {
		out = append(out, "bridge "+Bridge)
	}
	for i := 1; i <= MaxNodes; i++ {
		if pids := netnsPIDs(NetNS(i)); len(pids) > 0 {
			out = append(out, fmt.Sprintf("processes in %s: %v", NetNS(i), pids))
		}
		for _, d := range cgroupDirs("/stratum-rc-" + NodeName(i)) {
			if _, err := os.Stat(d); err == nil {
				out = append(out, "cgroup "+d)
			}
		}
	}
	if pids := processesWith(dir); len(pids) > 0 {
		out = append(out, fmt.Sprintf("processes naming %s: %v", dir, pids))
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), " "+dir+"/") {
		out = append(out, "mounts under "+dir)
	}
	for _, p := range []string{dir, createdRecord(dir)} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
