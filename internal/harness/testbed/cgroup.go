package testbed

// This file gives the kubelet stand-in a cgroup v2 directory to make its
// pods' cgroups in, as a real kubelet does, so that stratum's process
// identity (proc.Scanner.Identify) is decided by pod cgroups on the test
// bed too.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
)

// cgroupParents numbers the parents this process creates.
var cgroupParents atomic.Uint64

// makeCgroupParent creates the node's cgroup parent, or returns "" (with
// the reason logged) when this machine does not let the test create one:
// not root, or no writable cgroup v2 hierarchy. The stand-in then runs
// every process in its own cgroup, and identity falls back to the binary
// name (docs/architecture.md, "Process identity").
func (n *Node) makeCgroupParent() string {
	if os.Geteuid() != 0 {
		n.log.Info("testbed: no pod cgroups (not root)")
		return ""
	}
	m := kubeletsim.UnifiedMount()
	if m == "" {
		n.log.Info("testbed: no pod cgroups (no cgroup v2 hierarchy)")
		return ""
	}
	sweepDeadParents(m)
	dir := filepath.Join(m, "stratum-testbed-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(cgroupParents.Add(1), 10))
	if err := os.Mkdir(dir, 0o755); err != nil {
		n.log.Info("testbed: no pod cgroups", "err", err)
		return ""
	}
	return dir
}

// sweepDeadParents removes the cgroup parents of test processes that are
// gone (a SIGKILLed test binary runs no teardown), best effort: a parent
// whose process is alive, or that still holds a process, stays.
func sweepDeadParents(mount string) {
	ents, err := os.ReadDir(mount)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "stratum-testbed-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		_ = removeTree(filepath.Join(mount, e.Name()), true)
	}
}

// clearCgroups removes every cgroup under the node's parent, deepest
// first, and the parent itself too when alsoParent: after a reboot no pod
// cgroup of the old boot is left, and after Stop nothing is. A cgroup
// still holding a process cannot be removed: that is an error.
func (n *Node) clearCgroups(alsoParent bool) error {
	if n.CgroupParent == "" {
		return nil
	}
	return removeTree(n.CgroupParent, alsoParent)
}

// removeTree removes the cgroups under root, deepest first, and root too
// when alsoRoot.
func removeTree(root string, alsoRoot bool) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (alsoRoot || p != root) {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("testbed: pod cgroups: %w", err)
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testbed: pod cgroups: %w", err)
	}
	return nil
}
