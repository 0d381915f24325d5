package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const staticUID = "6c8ef3d2a1b04f5e9d7c0b1a2e3f4a5b"

func TestPodPaths(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []podLine
	}{
		{"cgroupfs v1 burstable", "12:pids:/kubepods/burstable/pod" + staticUID + "/0123abcd\n11:name=systemd:/kubepods/burstable/pod" + staticUID + "/0123abcd\n",
			[]podLine{{"pids", "/kubepods/burstable/pod" + staticUID}, {"name=systemd", "/kubepods/burstable/pod" + staticUID}}},
		{"cgroupfs guaranteed (no qos level)", "3:memory:/kubepods/pod" + staticUID + "/ctr\n",
			[]podLine{{"memory", "/kubepods/pod" + staticUID}}},
		{"systemd v2", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-0123.scope\n",
			[]podLine{{"", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice"}}},
		{"systemd v2 guaranteed, API pod uid", "0::/kubepods.slice/kubepods-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/cri-containerd-0123.scope\n",
			[]podLine{{"", "/kubepods.slice/kubepods-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice"}}},
		{"not a pod: a user session", "0::/user.slice/user-0.slice/session-3.scope\n", nil},
		{"not a pod: podman's names", "0::/machine.slice/libpod-0123.scope\n1:cpu:/pods/podcast\n", nil},
		{"root cgroup and garbage", "0::/\nnonsense\n2:cpu:relative/pod" + staticUID + "\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := podPaths([]byte(tc.file))
			if !slices.Equal(got, tc.want) {
				t.Errorf("podPaths:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestPodCgroupsFakeTree: a process table and a v1 cgroup tree laid out by
// hand. Only the directories that exist count; a process without a pod
// cgroup and a gone one contribute nothing.
func TestPodCgroupsFakeTree(t *testing.T) {
	pod := "/kubepods/burstable/pod" + staticUID
	root := fakeRoot(t, map[string]string{
		"100/cgroup": "5:pids:" + pod + "/ctr\n4:cpu,cpuacct:" + pod + "/ctr\n1:name=systemd:" + pod + "/ctr\n2:memory:" + pod + "/ctr\n",
		"200/cgroup": "0::/user.slice\n",
	})
	cg := t.TempDir()
	for _, h := range []string{"pids", "cpu,cpuacct", "systemd"} { // memory: not mounted here
		if err := os.MkdirAll(filepath.Join(cg, h, pod, "ctr"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithCgroupRoot(cg)
	got, err := s.PodCgroups([]Process{{PID: 100}, {PID: 200}, {PID: 300}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(cg, "cpu,cpuacct", pod), filepath.Join(cg, "pids", pod), filepath.Join(cg, "systemd", pod)}
	if !slices.Equal(got, want) {
		t.Fatalf("PodCgroups:\n got %v\nwant %v", got, want)
	}
	if gone, err := CgroupsGone(got); err != nil || gone {
		t.Fatalf("CgroupsGone with every directory present = %v, %v", gone, err)
	}
	for _, d := range got {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
	}
	if gone, err := CgroupsGone(got); err != nil || !gone {
		t.Fatalf("CgroupsGone after removal = %v, %v", gone, err)
	}
}

func TestPodCgroupsUnreadableIsError(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode-0 file")
	}
	root := fakeRoot(t, map[string]string{"100/cgroup": "0::/kubepods/pod" + staticUID + "/c\n"})
	if err := os.Chmod(filepath.Join(root, "100/cgroup"), 0); err != nil {
		t.Fatal(err)
	}
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PodCgroups([]Process{{PID: 100}}); err == nil {
		t.Fatal("an unreadable cgroup file was taken for no pod cgroup")
	}
}

func TestWaitCgroupsGoneDeadlineNamesWhatIsLeft(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pod"+staticUID)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := Host().WaitCgroupsGone(context.Background(), []string{dir}, 120*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("WaitCgroupsGone on a directory that stays = %v, want a deadline naming it", err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = os.Remove(dir)
	}()
	if err := Host().WaitCgroupsGone(context.Background(), []string{dir}, 5*time.Second); err != nil {
		t.Fatalf("WaitCgroupsGone after the directory went: %v", err)
	}
}

// TestPodCgroupsRealHierarchy puts a real process into a real cgroup named
// the way kubelet's cgroupfs driver names a pod's, finds it through
// /proc/<pid>/cgroup, and sees it gone once the process exited and the
// cgroup was removed (as kubelet's pcm.Destroy does).
func TestPodCgroupsRealHierarchy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup: make test as root")
	}
	hier := filepath.Join(DefaultCgroupRoot, "pids") // cgroup v1
	if _, err := os.Stat(filepath.Join(hier, "cgroup.procs")); err != nil {
		hier = DefaultCgroupRoot // cgroup v2
	}
	uid := fmt.Sprintf("%032x", os.Getpid())
	top := filepath.Join(hier, fmt.Sprintf("stratum-proctest-%d", os.Getpid()))
	pod := filepath.Join(top, "pod"+uid)
	ctr := filepath.Join(pod, "ctr")
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		t.Skipf("cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		_ = os.Remove(ctr)
		_ = os.Remove(pod)
		_ = os.Remove(top)
	})
	cmd := startHelper(t, uniqueName(t, "cg"), "sleep")
	if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Skipf("cannot move a process into a cgroup here: %v", err)
	}
	got, err := Host().PodCgroups([]Process{{PID: cmd.Process.Pid}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, pod) {
		t.Fatalf("PodCgroups = %v, want it to hold %s", got, pod)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	go func() {
		for os.Remove(ctr) != nil {
			time.Sleep(10 * time.Millisecond) // the kernel frees a cgroup a moment after its last task
		}
		_ = os.Remove(pod)
	}()
	if err := Host().WaitCgroupsGone(context.Background(), []string{pod}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
