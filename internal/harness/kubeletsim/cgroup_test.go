package kubeletsim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/ciq/stratum-upgrade/proc"
)

// TestPodCgroup: with CgroupParent a container runs in its pod's cgroup,
// named as kubelet's cgroupfs driver names it, from its first instruction;
// the pod cgroup goes when the pod's name is released.
func TestPodCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	m := UnifiedMount()
	if m == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	parent := filepath.Join(m, "stratum-ksimtest-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		_ = os.Remove(filepath.Join(parent, "kubepods", "besteffort"))
		_ = os.Remove(filepath.Join(parent, "kubepods"))
		_ = os.Remove(parent)
	})
	b := newBed(t, func(c *Config) { c.CgroupParent = parent })
	b.write("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	p := b.waitRunning(key("kube-scheduler"), nil)
	cg, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	pod := filepath.Join(parent, "kubepods", "besteffort", "pod"+p.UID)
	want := "0::" + strings.TrimPrefix(pod, m) + "/kube-scheduler\n"
	if !strings.Contains(string(cg), want) {
		t.Fatalf("/proc/%d/cgroup = %q, want a line %q", p.PID, cg, want)
	}
	if got := proc.Host().Place(p.PID); got != proc.StaticPod {
		t.Fatalf("Place(%d) = %v, want StaticPod", p.PID, got)
	}
	b.remove("kube-scheduler.yaml")
	b.waitGone(key("kube-scheduler"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(pod); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod cgroup %s still there 10s after the pod was gone", pod)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestQOSClass(t *testing.T) {
	q := resource.MustParse
	res := func(req, lim corev1.ResourceList) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: req, Limits: lim}
	}
	cpuMem := corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("64Mi")}
	for _, tc := range []struct {
		name string
		r    corev1.ResourceRequirements
		want corev1.PodQOSClass
	}{
		{"nothing", res(nil, nil), corev1.PodQOSBestEffort},
		{"cpu request (kubeadm's)", res(corev1.ResourceList{corev1.ResourceCPU: q("250m")}, nil), corev1.PodQOSBurstable},
		{"limits only", res(nil, cpuMem), corev1.PodQOSGuaranteed},
		{"equal", res(cpuMem, cpuMem), corev1.PodQOSGuaranteed},
		{"request below limit", res(corev1.ResourceList{corev1.ResourceCPU: q("50m"), corev1.ResourceMemory: q("64Mi")}, cpuMem), corev1.PodQOSBurstable},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: tc.r}}}}
		if got := qosClass(pod); got != tc.want {
			t.Errorf("%s: qosClass = %s, want %s", tc.name, got, tc.want)
		}
	}
}
