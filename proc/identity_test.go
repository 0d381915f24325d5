package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// identityTable is a process table of etcds in every kind of place kubelet
// (or anything else) puts one, and a kube-apiserver in a static pod.
func identityTable(t *testing.T) string {
	t.Helper()
	const api = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	files := map[string]string{
		// the node's etcd: static pod, cgroupfs driver, v1 and v2 lines
		"100/cgroup": "4:memory:/kubepods/burstable/pod" + staticUID + "/ctr\n0::/kubepods/burstable/pod" + staticUID + "/ctr\n",
		// a static pod under the systemd driver, Guaranteed (no qos level)
		"101/cgroup": "0::/kubepods.slice/kubepods-pod" + staticUID + ".slice/cri-containerd-1.scope\n",
		// a CNI's etcd: an API pod, systemd driver (underscores) and cgroupfs (dashes)
		"102/cgroup": "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + "1b4e28ba_2fa1_11d2_883f_0016d3cca427" + ".slice/cri-containerd-2.scope\n",
		"103/cgroup": "0::/kubepods/besteffort/pod" + api + "/ctr\n",
		// a developer's etcd in a user session
		"104/cgroup": "0::/user.slice/user-0.slice/session-3.scope\n",
		// 105 has no cgroup file: unknown
		// a kube-apiserver in the static pod: not etcd, whatever its cgroup
		"106/cgroup": "0::/kubepods/burstable/pod" + staticUID + "/ctr\n",
	}
	for pid, argv0 := range map[int]string{100: "etcd", 101: "/usr/local/bin/etcd", 102: "etcd", 103: "etcd", 104: "etcd", 105: "etcd", 106: "kube-apiserver"} {
		files[itoa(pid)+"/cmdline"] = argv0 + "\x00--flag\x00"
		files[itoa(pid)+"/stat"] = statLine(pid, "x", 'S', 1, uint64(pid))
	}
	return fakeRoot(t, files)
}

func TestIdentifyByPodCgroup(t *testing.T) {
	s, err := NewScanner(identityTable(t))
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithCgroupRoot(t.TempDir()) // no kubepods: the processes' own cgroups decide
	id, err := s.Identify(Target{Name: "etcd", Binary: "etcd"})
	if err != nil {
		t.Fatal(err)
	}
	if !id.ByCgroup {
		t.Error("ByCgroup = false with etcds in static pod cgroups")
	}
	if got, want := pidsOf(id.Ours), []int{100, 101, 105}; !slices.Equal(got, want) {
		t.Errorf("Ours = %v, want %v (static pods, and the unreadable one as unknown)", got, want)
	}
	if got, want := pidsOf(id.Foreign), []int{102, 103, 104}; !slices.Equal(got, want) {
		t.Errorf("Foreign = %v, want %v (API pods, a user session)", got, want)
	}
	ours, err := s.Of(Target{Name: "kube-apiserver", Binary: "kube-apiserver"})
	if err != nil || !slices.Equal(pidsOf(ours), []int{106}) {
		t.Errorf("Of(kube-apiserver) = %v, %v: want only the process running that binary", pidsOf(ours), err)
	}
}

// TestIdentifyWithoutPodCgroups: where kubelet makes no pod cgroups, the
// name decides, as before; a kubepods cgroup at a hierarchy's root says
// kubelet makes them, and a process outside one is then foreign.
func TestIdentifyWithoutPodCgroups(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"200/cmdline": "etcd\x00", "200/stat": statLine(200, "etcd", 'S', 1, 5), "200/cgroup": "0::/system.slice/etcd.service\n",
		"201/cmdline": "etcd\x00", "201/stat": statLine(201, "etcd", 'S', 1, 6), "201/cgroup": "0::/\n",
	})
	cg := t.TempDir()
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithCgroupRoot(cg)
	tg := Target{Name: "etcd", Binary: "etcd"}
	id, err := s.Identify(tg)
	if err != nil || id.ByCgroup || !slices.Equal(pidsOf(id.Ours), []int{200, 201}) || len(id.Foreign) != 0 {
		t.Fatalf("no pod cgroups anywhere: Identify = %+v, %v; want both by name", id, err)
	}
	if err := os.MkdirAll(filepath.Join(cg, "cpu", "kubepods"), 0o755); err != nil {
		t.Fatal(err)
	}
	id, err = s.Identify(tg)
	if err != nil || !id.ByCgroup || len(id.Ours) != 0 || !slices.Equal(pidsOf(id.Foreign), []int{200, 201}) {
		t.Fatalf("kubepods exists: Identify = %+v, %v; want both foreign", id, err)
	}
	// A scoped scanner sees one stand-in's tree: the host's kubepods is
	// another kubelet's and does not decide for it.
	id, err = s.Within(1).Identify(tg)
	if err != nil || id.ByCgroup || len(id.Ours) != 2 {
		t.Fatalf("scoped, kubepods exists: Identify = %+v, %v; want both by name", id, err)
	}
}

// TestWaitsIgnoreAForeignProcess runs two processes of one binary, one in a
// real pod cgroup and one outside: only the one in the pod is the
// component's. WaitGone ends when it exits although the other runs on,
// and Replaced does not take the other for a replacement.
func TestWaitsIgnoreAForeignProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	m := ""
	for _, d := range []string{DefaultCgroupRoot, filepath.Join(DefaultCgroupRoot, "unified")} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.subtree_control")); err == nil {
			m = d
			break
		}
	}
	if m == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	top := filepath.Join(m, "stratum-identtest-"+itoa(os.Getpid()))
	ctr := filepath.Join(top, "kubepods", "burstable", "pod"+staticUID, "ctr")
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		t.Skipf("cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		for d := ctr; d != m; d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	name := uniqueName(t, "etcd")
	s := self()
	tg := Target{Name: "etcd", Binary: name}
	mark, err := s.Mark()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PastMark(context.Background(), mark); err != nil {
		t.Fatal(err)
	}
	foreign := startHelper(t, name, "sleep") // started after the mark
	ours := startHelper(t, name, "sleep")
	if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(itoa(ours.Process.Pid)), 0o644); err != nil {
		t.Skipf("cannot move a process into a cgroup here: %v", err)
	}
	id, err := s.Identify(tg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pidsOf(id.Ours), []int{ours.Process.Pid}) || !slices.Equal(pidsOf(id.Foreign), []int{foreign.Process.Pid}) {
		t.Fatalf("Identify = ours %v foreign %v; want ours [%d] foreign [%d]", pidsOf(id.Ours), pidsOf(id.Foreign), ours.Process.Pid, foreign.Process.Pid)
	}
	_ = syscall.Kill(-ours.Process.Pid, syscall.SIGKILL)
	_ = ours.Wait()
	if err := s.WaitGone(context.Background(), tg, 5*time.Second); err != nil {
		t.Fatalf("WaitGone with only a foreign process left: %v", err)
	}
	if done, _, err := s.Replaced(tg, mark); err != nil || done {
		t.Fatalf("Replaced with only a foreign process (started after the mark) = %v, %v; want not done", done, err)
	}
}

const (
	surgeUID = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	fakeBoot = "11111111-2222-3333-4444-555555555555"
)

// surgeTable is a kube-apiserver surge in a fake process table: pid 300 in
// the surge pod (cgroupfs driver), started at tick 50; pids 301 and 302 in
// the canonical pod (systemd driver), started at ticks 200 and 210; pid 303
// with no cgroup file (unknown), started at tick 220.
func surgeTable(t *testing.T) *Scanner {
	t.Helper()
	files := map[string]string{
		"300/cgroup": "0::/kubepods/burstable/pod" + surgeUID + "/ctr\n",
		"301/cgroup": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-1.scope\n",
		"302/cgroup": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-1.scope\n",
	}
	for pid, ticks := range map[int]uint64{300: 50, 301: 200, 302: 210, 303: 220} {
		files[itoa(pid)+"/cmdline"] = "kube-apiserver\x00--permit-port-sharing=true\x00--secure-port=6443\x00"
		files[itoa(pid)+"/stat"] = statLine(pid, "kube-apiserver", 'S', 1, ticks)
	}
	s, err := NewScanner(fakeRoot(t, files))
	if err != nil {
		t.Fatal(err)
	}
	return s.WithCgroupRoot(t.TempDir())
}

// TestNotPodsLeavesTheSurgeOut: the surge pod's process started before the
// mark of the canonical pod's write; without NotPods it is stale and the
// canonical pod's replacement never done, with NotPods (in either
// driver's spelling) it is nobody's. The unknown process stays t's.
func TestNotPodsLeavesTheSurgeOut(t *testing.T) {
	s := surgeTable(t)
	m := Mark{Ticks: 100, BootID: fakeBoot}
	all := Target{Name: "kube-apiserver", Binary: "kube-apiserver"}
	if done, stale, err := s.Replaced(all, m); err != nil || done || !slices.Equal(pidsOf(stale), []int{300}) {
		t.Fatalf("without NotPods: Replaced = %v, %v, %v; want not done, stale [300]", done, pidsOf(stale), err)
	}
	for _, spelled := range []string{surgeUID, strings.ToUpper(surgeUID)} {
		tg := all
		tg.NotPods = []string{"1b4e28ba_2fa1_11d2_883f_0016d3cca427", spelled}
		id, err := s.Identify(tg)
		if err != nil || !slices.Equal(pidsOf(id.Ours), []int{301, 302, 303}) || len(id.Foreign) != 0 {
			t.Fatalf("NotPods %q: Identify = ours %v foreign %v, %v; want ours [301 302 303], no foreign", spelled, pidsOf(id.Ours), pidsOf(id.Foreign), err)
		}
		if done, stale, err := s.Replaced(tg, m); err != nil || !done {
			t.Fatalf("NotPods %q: Replaced = %v, %v, %v; want done", spelled, done, pidsOf(stale), err)
		}
		if err := s.WaitReplaced(context.Background(), tg, m, time.Second); err != nil {
			t.Fatalf("NotPods %q: WaitReplaced: %v", spelled, err)
		}
	}
	// Only the surge pod excluded from a look at the canonical pod's
	// processes: the canonical ones (and the unknown one) keep WaitGone.
	tg := all
	tg.NotPods = []string{surgeUID}
	err := s.WaitGone(context.Background(), tg, 30*time.Millisecond)
	var we *WaitError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "pids 301, 302, 303") {
		t.Fatalf("WaitGone with the canonical pod running = %v; want a timeout naming pids 301, 302, 303", err)
	}
}
