package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkPIDs scans the real /proc, whatever runs on the machine.
func BenchmarkPIDs(b *testing.B) {
	s := Host()
	n := 0
	if pids, err := s.list(); err == nil {
		n = len(pids)
	}
	b.ReportMetric(float64(n), "procs")
	for b.Loop() {
		if _, err := s.PIDs("kube-scheduler"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPIDsScoped is BenchmarkPIDs scoped to this process's tree, as
// the tests scan.
func BenchmarkPIDsScoped(b *testing.B) {
	s := Host().Within(1)
	for b.Loop() {
		if _, err := s.PIDs("kube-scheduler"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOf is BenchmarkPIDs with identity: each match's cgroup file,
// and (unscoped) the look for kubepods at the hierarchies' roots.
func BenchmarkOf(b *testing.B) {
	s := Host()
	for b.Loop() {
		if _, err := s.Of(Target{Name: "kube-scheduler", Binary: "kube-scheduler"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPgrep is the yardstick: pgrep -f over the same /proc, including
// its own process start.
func BenchmarkPgrep(b *testing.B) {
	path, err := exec.LookPath("pgrep")
	if err != nil {
		b.Skip("no pgrep on this machine")
	}
	for b.Loop() {
		// Exit status 1 means no match, which is fine.
		_ = exec.Command(path, "-f", "kube-scheduler").Run()
	}
}

func BenchmarkStartTicks(b *testing.B) {
	s := Host()
	for b.Loop() {
		if _, _, err := s.StartTicks(1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMark(b *testing.B) {
	s := Host()
	for b.Loop() {
		if _, err := s.Mark(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWaitInstanceActive measures what a WaitInstanceActive costs
// this process while it waits 3 s to its deadline, as wait-cpu-% (its CPU
// over the wall time): for a pod whose instance answers 500 while the
// other instance on its port answers 200 (every attempt fails, about half
// reach the other instance), and (idle-pod-cpu-%) for a pod whose process
// does not listen yet (every answer is the other instance's). The
// yardstick is WaitActive on an endpoint that answers 500 (active-cpu-%);
// attempt-cpu-ms is one attempt of the first case. Needs root and a
// writable cgroup v2 (real pod cgroups).
func BenchmarkWaitInstanceActive(b *testing.B) {
	const idleUID = "fedcba98765432100123456789abcdef"
	healthyCg, sickCg, idleCg := podCgroup(b, staticUID), podCgroup(b, surgeUID), podCgroup(b, idleUID)
	name := "proctest-bench-apiserver-" + itoa(os.Getpid())
	healthy, sick, url := twoInstances(b, name)
	moveTo(b, healthyCg, healthy.Process.Pid)
	moveTo(b, sickCg, sick.Process.Pid)
	moveTo(b, idleCg, startHelper(b, name, "sleep").Process.Pid)
	_, port := startHealth(b, name+"-alone", 500, 0)
	alone := Target{Name: "alone", Binary: name + "-alone", Health: fmt.Sprintf("https://127.0.0.1:%d/healthz", port)}
	s := Host().Within(os.Getpid())
	tg := Target{Name: "kube-apiserver", Binary: name, Health: url}
	const wait = 3 * time.Second
	measure := func(f func()) (cpuPct float64, cpu time.Duration) {
		c0, t0 := cpuTime(b), time.Now()
		f()
		cpu = cpuTime(b) - c0
		return 100 * float64(cpu) / float64(time.Since(t0)), cpu
	}
	var pct, idlePct, activePct float64
	for b.Loop() {
		pct, _ = measure(func() { _ = s.WaitInstanceActive(context.Background(), tg, surgeUID, wait) })
		idlePct, _ = measure(func() { _ = s.WaitInstanceActive(context.Background(), tg, idleUID, wait) })
		activePct, _ = measure(func() { _ = s.WaitActive(context.Background(), alone, wait) })
	}
	pod := &podWatch{s: s, t: tg, uid: surgeUID}
	const n = 50
	_, cpu := measure(func() {
		for range n {
			ps, _, err := pod.processes()
			if err != nil || len(ps) == 0 {
				b.Fatalf("pod processes: %v, %v", ps, err)
			}
			_, _ = s.answeredBy(context.Background(), url, pidsOf(ps))
		}
	})
	b.ReportMetric(pct, "wait-cpu-%")
	b.ReportMetric(idlePct, "idle-pod-cpu-%")
	b.ReportMetric(activePct, "active-cpu-%")
	b.ReportMetric(float64(cpu)/n/1e6, "attempt-cpu-ms")
}

// cpuTime is this process's CPU time so far, user plus system.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
