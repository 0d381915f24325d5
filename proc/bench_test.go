package proc

import (
	"os/exec"
	"testing"
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
