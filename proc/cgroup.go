package proc

// Pod cgroups: the one trace of a terminating static pod that kubelet
// removes just before it releases the pod's name (docs/kubelet-hold.md).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DefaultCgroupRoot is where the cgroup hierarchies are mounted: the
// unified hierarchy itself (cgroup v2), or one directory per hierarchy
// (cgroup v1: cpu,cpuacct, memory, pids, systemd, ...).
const DefaultCgroupRoot = "/sys/fs/cgroup"

// WithCgroupRoot returns a copy of s that looks for cgroup directories
// under dir instead of DefaultCgroupRoot: for tests that lay out a cgroup
// tree by hand next to a fake process table.
func (s *Scanner) WithCgroupRoot(dir string) *Scanner {
	c := *s
	c.armed = nil
	c.cgroupRoot = dir
	return &c
}

func (s *Scanner) cgroupDir() string {
	if s.cgroupRoot != "" {
		return s.cgroupRoot
	}
	return DefaultCgroupRoot
}

// PodCgroups is the pod-level cgroup directories kubelet created for the
// pods of processes ps, sorted: from every line of /proc/<pid>/cgroup, the
// path cut after its pod component -- pod<UID> with kubelet's cgroupfs
// driver (/kubepods/burstable/pod<UID>/<container>), kubepods-<qos>-pod<UID>.slice
// with the systemd driver -- under each mount it exists in (the unified
// hierarchy, or every v1 hierarchy). kubelet removes them (pcm.Destroy) as
// the last act of a terminated pod's worker, right before the pod's name is
// released for a new pod.
//
// A process whose cgroups have no pod component (not run by kubelet, or
// kubelet runs with cgroupsPerQOS off) contributes nothing, and neither does
// one that is gone; an empty result means the pod cgroup cannot be
// observed. Any other failure to read a process's cgroup file is an error.
func (s *Scanner) PodCgroups(ps []Process) ([]string, error) {
	var out []string
	for _, p := range ps {
		b, err := os.ReadFile(s.pidFile(p.PID, "cgroup"))
		if err != nil {
			if isGone(err) {
				continue
			}
			return nil, fmt.Errorf("pod cgroups of pid %d: %w", p.PID, err)
		}
		for _, rel := range podPaths(b) {
			for _, dir := range s.mounts(rel) {
				if fi, err := os.Stat(dir); err == nil && fi.IsDir() && !slices.Contains(out, dir) {
					out = append(out, dir)
				}
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// podLine is one line of /proc/<pid>/cgroup cut after its pod component.
type podLine struct {
	controllers string // "" in the unified hierarchy
	path        string
}

// podPaths parses /proc/<pid>/cgroup ("id:controllers:path" per line) and
// keeps each path cut after its pod component; lines without one are
// dropped.
func podPaths(b []byte) []podLine {
	var out []podLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		elems := strings.Split(parts[2], "/")
		for i, el := range elems {
			if isPodElem(el) {
				out = append(out, podLine{controllers: parts[1], path: strings.Join(elems[:i+1], "/")})
				break
			}
		}
	}
	return out
}

// isPodElem reports whether el is kubelet's name for a pod cgroup:
// "pod<UID>" (cgroupfs driver) or "kubepods[-<qos>]-pod<UID>.slice"
// (systemd driver, with the UID's dashes as underscores)
// (pkg/kubelet/cm/pod_container_manager_linux.go, podCgroupNamePrefix).
func isPodElem(el string) bool {
	if uid, ok := strings.CutPrefix(el, "pod"); ok {
		return isUID(uid)
	}
	if name, ok := strings.CutSuffix(el, ".slice"); ok && strings.HasPrefix(name, "kubepods") {
		if i := strings.LastIndex(name, "-pod"); i >= 0 {
			return isUID(name[i+len("-pod"):])
		}
	}
	return false
}

// isUID reports whether s could be a pod UID: a static pod's is a hex hash,
// an API pod's a dashed (or, under systemd, underscored) UUID.
func isUID(s string) bool {
	if len(s) < 8 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// mounts is where the cgroup of l may be found: under the unified
// hierarchy's mount, and, for a v1 line, under its hierarchy's directory
// (named by its controllers, "cpu,cpuacct", or its name, "systemd").
func (s *Scanner) mounts(l podLine) []string {
	root := s.cgroupDir()
	if l.controllers == "" {
		return []string{filepath.Join(root, l.path), filepath.Join(root, "unified", l.path)}
	}
	return []string{filepath.Join(root, strings.TrimPrefix(l.controllers, "name="), l.path)}
}

// CgroupsGone reports whether none of dirs exists any more. A directory
// that cannot be checked for a reason other than its absence is an error:
// unknown, never gone.
func CgroupsGone(dirs []string) (bool, error) {
	for _, d := range dirs {
		_, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("pod cgroup %s: %w", d, err)
		}
		return false, nil
	}
	return true, nil
}

// cgroupPoll is how often WaitCgroupsGone looks: a stat of a few
// directories, negligible next to the wait's purpose.
const cgroupPoll = 50 * time.Millisecond

// WaitCgroupsGone waits until none of dirs exists, at most timeout. On
// timeout the error says which directories are left; kubelet removes a pod
// cgroup only once everything in it has exited and its volumes are
// unmounted, so one that stays names a pod kubelet could not finish.
func (s *Scanner) WaitCgroupsGone(ctx context.Context, dirs []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(cgroupPoll)
	defer t.Stop()
	for {
		gone, err := CgroupsGone(dirs)
		if err != nil || gone {
			return err
		}
		select {
		case <-ctx.Done():
			var left []string
			for _, d := range dirs {
				if _, err := os.Lstat(d); err == nil {
					left = append(left, d)
				}
			}
			return fmt.Errorf("kubelet did not remove the pod cgroup within %s (left: %s): %w", timeout, strings.Join(left, ", "), ctx.Err())
		case <-t.C:
		}
	}
}
