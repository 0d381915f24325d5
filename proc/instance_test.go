package proc

import (
	"errors"
	"os"
	"slices"
	"testing"
)

func TestInstances(t *testing.T) {
	s := surgeTable(t)
	tg := Target{Name: "kube-apiserver", Binary: "kube-apiserver"}
	insts, byPod, err := s.Instances(tg)
	if err != nil || !byPod {
		t.Fatalf("Instances = %v, %v, %v", insts, byPod, err)
	}
	want := []Instance{
		{PodUID: surgeUID, Processes: []Process{{300, 50}}},
		{PodUID: staticUID, Processes: []Process{{301, 200}, {302, 210}}},
		{PodUID: "", Processes: []Process{{303, 220}}},
	}
	if !slices.EqualFunc(insts, want, func(a, b Instance) bool { return a.PodUID == b.PodUID && slices.Equal(a.Processes, b.Processes) }) {
		t.Fatalf("Instances =\n %v\nwant (earliest first, the unreadable one under \"\")\n %v", insts, want)
	}
	tg.NotPods = []string{surgeUID}
	if insts, _, err := s.Instances(tg); err != nil || len(insts) != 2 || insts[0].PodUID != staticUID {
		t.Fatalf("Instances with the surge pod excluded = %v, %v", insts, err)
	}
	ps, byPod, err := s.podProcesses(tg, staticUID)
	if err != nil || !byPod || !slices.Equal(pidsOf(ps), []int{301, 302}) {
		t.Fatalf("podProcesses(%s) = %v, %v, %v; want [301 302]", staticUID, pidsOf(ps), byPod, err)
	}
}

// TestInstancesWithoutPodCgroups: processes outside any pod cgroup are one
// instance that cannot be told apart.
func TestInstancesWithoutPodCgroups(t *testing.T) {
	root := fakeRoot(t, map[string]string{
		"400/cmdline": "kube-scheduler\x00", "400/stat": statLine(400, "s", 'S', 1, 9), "400/cgroup": "0::/system.slice/x.service\n",
		"401/cmdline": "kube-scheduler\x00", "401/stat": statLine(401, "s", 'S', 1, 7), "401/cgroup": "0::/\n",
	})
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	insts, byPod, err := s.WithCgroupRoot(t.TempDir()).Instances(Target{Name: "kube-scheduler", Binary: "kube-scheduler"})
	if err != nil || byPod || len(insts) != 1 || insts[0].PodUID != "" || !slices.Equal(pidsOf(insts[0].Processes), []int{400, 401}) {
		t.Fatalf("Instances = %v, byPod %v, %v; want one instance \"\" of [400 401], byPod false", insts, byPod, err)
	}
}

func TestArgs(t *testing.T) {
	s := surgeTable(t)
	args, err := s.Args(Process{PID: 301, StartTicks: 200})
	if err != nil || !slices.Equal(args, []string{"kube-apiserver", "--permit-port-sharing=true", "--secure-port=6443"}) {
		t.Fatalf("Args = %q, %v", args, err)
	}
	for _, p := range []Process{{PID: 301, StartTicks: 199}, {PID: 999, StartTicks: 1}} {
		if _, err := s.Args(p); !errors.Is(err, ErrProcessGone) {
			t.Errorf("Args(%+v) = %v; want ErrProcessGone (pid reused, or no such pid)", p, err)
		}
	}
	// The live process: this test's own argv.
	self := Host()
	ticks, _, err := self.StartTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if args, err := self.Args(Process{PID: os.Getpid(), StartTicks: ticks}); err != nil || !slices.Equal(args, os.Args) {
		t.Fatalf("Args(self) = %q, %v; want %q", args, err, os.Args)
	}
}
