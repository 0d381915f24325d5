package e2e

// This file tears a Host down and cleans up after a killed run: logs, mounts, cgroups and host paths.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop tears the Host down, in the order the recipe requires, and returns
// every problem it met (nil when the teardown was clean): remove every
// manifest and wait until containerd runs no task; stop kubelet, then
// containerd, each by PID (SIGTERM, SIGKILL after 30 s); kill any shim or
// container process still there (an error); unmount everything under the
// root; remove the kubepods cgroups, the host paths that did not exist at
// start, and the root (unless keep).
func (h *Host) Stop(keep bool) error {
	var problems []string
	ctx := context.Background()
	if h.containerd != nil && h.containerd.alive() {
		if ents, err := os.ReadDir(h.ManifestDir); err == nil {
			for _, e := range ents {
				_ = os.RemoveAll(filepath.Join(h.ManifestDir, e.Name()))
			}
		}
		if h.kubelet != nil && h.kubelet.alive() {
			start := time.Now()
			err := waitUntil(ctx, "every containerd task gone after the manifests were removed", 90*time.Second, func() (bool, error) {
				ts, err := h.Tasks(ctx)
				return err == nil && len(ts) == 0, nil
			})
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				h.logf("every task gone %s after the manifests were removed", time.Since(start).Round(time.Millisecond))
			}
		} else {
			problems = append(problems, "kubelet was not running at teardown")
		}
	}
	if h.kubelet != nil && h.kubelet.stop(30*time.Second) {
		problems = append(problems, "kubelet ignored SIGTERM for 30s; killed")
	}
	if h.containerd != nil && h.containerd.stop(30*time.Second) {
		problems = append(problems, "containerd ignored SIGTERM for 30s; killed")
	}
	if left := h.killLeftovers(); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes left behind and killed: %v", left))
	}
	if h.SaveLogs != "" {
		if err := h.saveLogs(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := unmountUnder(h.Root); err != nil {
		problems = append(problems, err.Error())
	}
	if err := removeKubepodsCgroups(); err != nil {
		problems = append(problems, err.Error())
	}
	for _, p := range h.created {
		if err := os.RemoveAll(p); err != nil {
			problems = append(problems, err.Error())
		}
	}
	_ = os.Remove(createdRecord(h.Root))
	if !keep {
		if err := os.RemoveAll(h.Root); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if h.unlock != nil {
		h.unlock()
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (h *Host) saveLogs() error {
	if err := os.RemoveAll(h.SaveLogs); err != nil {
		return fmt.Errorf("save logs: %w", err)
	}
	if err := os.MkdirAll(h.SaveLogs, 0o755); err != nil {
		return fmt.Errorf("save logs: %w", err)
	}
	for _, p := range []string{h.KubeletLog, h.ContainerdLog} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(h.SaveLogs, filepath.Base(p)), b, 0o644); err != nil {
			return fmt.Errorf("save logs: %w", err)
		}
	}
	return nil
}

// cleanStale undoes what a killed run left: its processes (found by the
// root in their command line) and everything under them, its mounts, its
// root, and the host paths it recorded as created.
func (h *Host) cleanStale() error {
	if left := h.killLeftovers(); len(left) > 0 {
		h.logf("killed processes of an earlier run: %v", left)
	}
	if err := unmountUnder(h.Root); err != nil {
		return err
	}
	if b, err := os.ReadFile(createdRecord(h.Root)); err == nil {
		for _, p := range strings.Fields(string(b)) {
			_ = os.RemoveAll(p)
		}
	}
	_ = removeKubepodsCgroups()
	if err := os.RemoveAll(h.Root); err != nil {
		return fmt.Errorf("e2e host: remove %s: %w", h.Root, err)
	}
	return nil
}

func createdRecord(root string) string { return root + ".created" }

// recordHostPaths notes which host paths (or which of their ancestors)
// are missing now, so teardown removes what this run created and nothing
// else; the list is also written beside the root for a later run to clean
// if this one is killed.
func (h *Host) recordHostPaths() error {
	seen := map[string]bool{}
	for _, p := range hostPaths {
		top := ""
		for d := p; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
				top = d
			}
		}
		if top != "" && !seen[top] {
			seen[top] = true
			h.created = append(h.created, top)
		}
	}
	return os.WriteFile(createdRecord(h.Root), []byte(strings.Join(h.created, "\n")+"\n"), 0o644)
}

// unmountUnder unmounts every mount point at or under root, deepest first
// (lazily when a plain unmount fails).
func unmountUnder(root string) error {
	for i := 0; i < 5; i++ {
		mps, err := mountsUnder(root)
		if err != nil || len(mps) == 0 {
			return err
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil {
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	}
	mps, err := mountsUnder(root)
	if err == nil && len(mps) > 0 {
		return fmt.Errorf("still mounted under %s: %v", root, mps)
	}
	return err
}

func mountsUnder(root string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == root || strings.HasPrefix(mp, root+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeKubepodsCgroups removes kubelet's kubepods cgroups (cgroupfs
// driver) in every hierarchy, leaves first. A cgroup that still has
// processes cannot be removed: that is an error.
func removeKubepodsCgroups() error {
	tops, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		tops = append(tops, "/sys/fs/cgroup/kubepods")
	}
	var failed []string
	for _, top := range tops {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				failed = append(failed, dirs[i]+": "+err.Error())
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("kubepods cgroups not removed: %v", failed)
	}
	return nil
}
