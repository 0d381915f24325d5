package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// podCgroup makes a real cgroup v2 directory named as kubelet's cgroupfs
// driver names a container's of pod uid, and returns it; it skips the test
// where that cannot be done (not root, no writable cgroup v2).
func podCgroup(t testing.TB, uid string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	m := ""
	for _, d := range []string{DefaultCgroupRoot, DefaultCgroupRoot + "/unified"} {
		if _, err := os.Stat(d + "/cgroup.subtree_control"); err == nil {
			m = d
			break
		}
	}
	if m == "" {
		t.Skip("no cgroup v2 hierarchy")
	}
	top := fmt.Sprintf("%s/stratum-insttest-%d-%d", m, os.Getpid(), nameSeq.Add(1))
	ctr := top + "/kubepods/burstable/pod" + uid + "/ctr"
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		t.Skipf("cannot create a cgroup here: %v", err)
	}
	t.Cleanup(func() {
		for d := ctr; d != m; d = d[:strings.LastIndexByte(d, '/')] {
			_ = os.Remove(d)
		}
	})
	return ctr
}

func moveTo(t testing.TB, cgroup string, pid int) {
	t.Helper()
	if err := os.WriteFile(cgroup+"/cgroup.procs", []byte(itoa(pid)), 0o644); err != nil {
		t.Skipf("cannot move a process into a cgroup here: %v", err)
	}
}

// TestWaitInstanceActive: two instances share a port in two real pod
// cgroups, one answering 200 and one 500. The healthy pod is found
// active; the sick one never is, though half its connections reach the
// healthy instance, and its deadline says so; once its process is gone
// the wait says that at once.
func TestWaitInstanceActive(t *testing.T) {
	healthyCg, sickCg := podCgroup(t, staticUID), podCgroup(t, surgeUID)
	name := uniqueName(t, "apiserver")
	healthy, sick, url := twoInstances(t, name)
	moveTo(t, healthyCg, healthy.Process.Pid)
	moveTo(t, sickCg, sick.Process.Pid)
	s := self()
	tg := Target{Name: "kube-apiserver", Binary: name, Health: url}
	insts, byPod, err := s.Instances(tg)
	if err != nil || !byPod || len(insts) != 2 {
		t.Fatalf("Instances = %v, %v, %v; want the two pods", insts, byPod, err)
	}
	if err := s.WaitInstanceActive(context.Background(), tg, staticUID, 10*time.Second); err != nil {
		t.Fatalf("WaitInstanceActive(healthy pod): %v", err)
	}
	// Each attempt's connection goes to either instance: wait again until
	// some went to the healthy one (almost always the first time).
	for range 5 {
		err = s.WaitInstanceActive(context.Background(), tg, surgeUID, 500*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), " 0 of ") {
			break
		}
	}
	var we *WaitError
	if !errors.As(err, &we) || !isDeadline(err) {
		t.Fatalf("WaitInstanceActive(sick pod) = %v; want a *WaitError at the deadline", err)
	}
	t.Log(err)
	for _, want := range []string{"kube-apiserver of pod " + surgeUID + " did not answer healthy on " + url, "HTTP 500", "answers came from other instances"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), " 0 of ") {
		t.Errorf("error %q: no answer counted from the healthy instance", err)
	}
	_ = syscall.Kill(-sick.Process.Pid, syscall.SIGKILL)
	_ = sick.Wait()
	// Gone is waited out (kubelet may restart it in the same pod), and
	// the deadline's error says why.
	err = s.WaitInstanceActive(context.Background(), tg, surgeUID, 300*time.Millisecond)
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "no process of kube-apiserver runs in pod "+surgeUID) {
		t.Fatalf("WaitInstanceActive(pod whose process is gone) = %v; want the deadline's error saying no process runs", err)
	}
	// The healthy pod, asked with the other one passed over, still is.
	tg.NotPods = []string{surgeUID}
	if err := s.WaitInstanceActive(context.Background(), tg, staticUID, 10*time.Second); err != nil {
		t.Fatalf("WaitInstanceActive(healthy pod, NotPods): %v", err)
	}
}

// TestWaitInstanceActiveWithoutPods: outside pod cgroups, instances cannot
// be told apart and the wait says so rather than wait.
func TestWaitInstanceActiveWithoutPods(t *testing.T) {
	name := uniqueName(t, "apiserver")
	_, _, url := twoInstances(t, name)
	err := self().WaitInstanceActive(context.Background(), Target{Name: "kube-apiserver", Binary: name, Health: url}, staticUID, time.Minute)
	if !errors.Is(err, ErrNoPodCgroups) {
		t.Fatalf("WaitInstanceActive without pod cgroups = %v; want ErrNoPodCgroups", err)
	}
}
