package kubeletsim

// Pod cgroups: kubelet runs a pod's containers in a cgroup named by the
// pod's QoS class and UID (cgroupfs driver: kubepods/<qos>/pod<UID>/<id>,
// kubepods/pod<UID>/<id> for Guaranteed; pkg/kubelet/cm
// pod_container_manager_linux.go), and stratum tells the node's
// components from a foreign process of the same name by that cgroup
// (proc.Scanner.Identify). With Config.CgroupParent the stand-in does the
// same under that cgroup v2 directory.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// UnifiedMount is where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup
// (unified mode) or /sys/fs/cgroup/unified (hybrid mode), "" when
// neither: where a CgroupParent can be made.
func UnifiedMount() string {
	for _, d := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return d
		}
	}
	return ""
}

// podCgroup is the pod cgroup directory of p, "" without CgroupParent.
func (k *Kubelet) podCgroup(p *pod) string {
	if k.cfg.CgroupParent == "" {
		return ""
	}
	dir := filepath.Join(k.cfg.CgroupParent, "kubepods")
	if q := qosClass(p.src.Pod); q != corev1.PodQOSGuaranteed {
		dir = filepath.Join(dir, map[corev1.PodQOSClass]string{corev1.PodQOSBurstable: "burstable", corev1.PodQOSBestEffort: "besteffort"}[q])
	}
	return filepath.Join(dir, "pod"+p.src.UID)
}

// intoCgroup makes cmd start in c's container cgroup (created if needed)
// with clone3's CLONE_INTO_CGROUP, so that the process is in it from its
// first instruction. Nothing happens without CgroupParent.
func (k *Kubelet) intoCgroup(cmd *exec.Cmd, c *container) error {
	pd := k.podCgroup(c.pod)
	if pd == "" {
		return nil
	}
	dir := filepath.Join(pd, c.spec.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("container cgroup: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("container cgroup: %w", err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
	closeAfterStart(cmd, f)
	return nil
}

// removePodCgroup removes p's pod cgroup and its container cgroups, as
// kubelet does once every process of a terminated pod is reaped. A
// directory still holding a process cannot go; that is logged, not fatal.
func (k *Kubelet) removePodCgroup(p *pod) {
	pd := k.podCgroup(p)
	if pd == "" {
		return
	}
	ents, err := os.ReadDir(pd)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := os.Remove(filepath.Join(pd, e.Name())); err != nil {
				k.log.Error("remove container cgroup", "key", p.src.Key, "err", err)
			}
		}
	}
	if err := os.Remove(pd); err != nil {
		k.log.Error("remove pod cgroup", "key", p.src.Key, "err", err)
	}
}

// qosClass is the pod's QoS class by kubelet's rule
// (pkg/apis/core/helper/qos): Guaranteed when every container limits cpu
// and memory with requests equal to the limits, BestEffort when none
// requests or limits anything, Burstable otherwise.
func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	some, guaranteed := false, true
	for _, c := range pod.Spec.Containers {
		r := c.Resources
		if len(r.Requests) > 0 || len(r.Limits) > 0 {
			some = true
		}
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			l, ok := r.Limits[n]
			if !ok {
				guaranteed = false
				continue
			}
			if q, ok := r.Requests[n]; ok && q.Cmp(l) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case !some:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}
