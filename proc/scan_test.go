package proc

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

func TestPIDsFindsExactlyTheBinary(t *testing.T) {
	name := uniqueName(t, "sched")
	bare := startHelper(t, name, "sleep")
	full := startHelperAt(t, linkHelper(t, name), filepath.Join(t.TempDir(), "bin", name), "sleep")
	// Near misses that must not match.
	startHelper(t, name+"-other", "sleep")
	startHelper(t, "x"+name, "sleep")
	startHelper(t, name+".bak", "sleep")
	startHelper(t, "/"+name+"/x", "sleep")

	want := []int{bare.Process.Pid, full.Process.Pid}
	slices.Sort(want)

	for _, tc := range []struct {
		label string
		s     *Scanner
	}{
		{"scoped", self()},
		{"host", Host()},
	} {
		t.Run(tc.label, func(t *testing.T) {
			ps, err := tc.s.PIDs(name)
			if err != nil {
				t.Fatal(err)
			}
			got := pidsOf(ps)
			if !slices.Equal(got, want) {
				t.Fatalf("PIDs(%s) = %v, want %v", name, got, want)
			}
			for _, p := range ps {
				pp, err := procfs.NewProc(p.PID)
				if err != nil {
					t.Fatal(err)
				}
				st, err := pp.Stat()
				if err != nil {
					t.Fatal(err)
				}
				if p.StartTicks != st.Starttime {
					t.Errorf("pid %d: StartTicks %d, procfs says %d", p.PID, p.StartTicks, st.Starttime)
				}
			}
		})
	}

	// A path given as the binary compares by its base name.
	ps, err := self().PIDs("/usr/local/bin/" + name)
	if err != nil || !slices.Equal(pidsOf(ps), want) {
		t.Fatalf("PIDs by path = %v, %v; want %v", ps, err, want)
	}
	if _, err := self().PIDs(""); err == nil {
		t.Fatal("PIDs(\"\") succeeded")
	}
}

func TestWithinIgnoresProcessesOutsideTheTree(t *testing.T) {
	// The real component name: other tests on this machine run processes
	// called kube-scheduler too, and the scope must hide them.
	mine := startHelper(t, "kube-scheduler", "sleep")
	sibling := startHelper(t, uniqueName(t, "sibling"), "sleep")

	ps, err := self().PIDs("kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	if got := pidsOf(ps); !slices.Equal(got, []int{mine.Process.Pid}) {
		t.Fatalf("Within(self).PIDs(kube-scheduler) = %v, want [%d]", got, mine.Process.Pid)
	}

	// A process is within its own scope; a sibling's scope does not hold it.
	ps, err = Host().Within(mine.Process.Pid).PIDs("kube-scheduler")
	if err != nil || !slices.Equal(pidsOf(ps), []int{mine.Process.Pid}) {
		t.Fatalf("Within(itself) = %v, %v", ps, err)
	}
	ps, err = Host().Within(sibling.Process.Pid).PIDs("kube-scheduler")
	if err != nil || len(ps) != 0 {
		t.Fatalf("Within(sibling) = %v, %v; want none", ps, err)
	}
	// Scopes narrow: self and then the sibling sees nothing of mine.
	ps, err = self().Within(sibling.Process.Pid).PIDs("kube-scheduler")
	if err != nil || len(ps) != 0 {
		t.Fatalf("Within(self).Within(sibling) = %v, %v; want none", ps, err)
	}
	// StartTicks honours the scope too.
	if _, alive, err := Host().Within(sibling.Process.Pid).StartTicks(mine.Process.Pid); err != nil || alive {
		t.Fatalf("StartTicks outside the scope: alive=%v err=%v, want not alive", alive, err)
	}
	if _, alive, err := self().StartTicks(mine.Process.Pid); err != nil || !alive {
		t.Fatalf("StartTicks inside the scope: alive=%v err=%v, want alive", alive, err)
	}
}

func TestZombieIsGone(t *testing.T) {
	name := uniqueName(t, "zombie")
	cmd := startHelper(t, name, "exit")
	pid := cmd.Process.Pid
	// Wait for the exit without reaping: the child stays a zombie.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := parseStat(stat); err != nil || st.state != 'Z' {
		t.Fatalf("precondition: pid %d is not a zombie: %q", pid, stat)
	}

	ps, err := self().PIDs(name)
	if err != nil || len(ps) != 0 {
		t.Fatalf("PIDs with a zombie = %v, %v; want none", ps, err)
	}
	if _, alive, err := self().StartTicks(pid); err != nil || alive {
		t.Fatalf("StartTicks(zombie) alive=%v err=%v; want not alive, no error", alive, err)
	}
	if running, err := self().Running(Target{Name: "z", Binary: name}); err != nil || running {
		t.Fatalf("Running with only a zombie = %v, %v", running, err)
	}
	_ = cmd.Wait()
}

func TestStartTicks(t *testing.T) {
	first := startHelper(t, uniqueName(t, "first"), "sleep")
	second := startHelper(t, uniqueName(t, "second"), "sleep")

	ticks1, alive, err := self().StartTicks(first.Process.Pid)
	if err != nil || !alive {
		t.Fatalf("StartTicks(live) alive=%v err=%v", alive, err)
	}
	p, err := procfs.NewProc(first.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if ticks1 != st.Starttime {
		t.Fatalf("StartTicks = %d, /proc says %d", ticks1, st.Starttime)
	}
	ticks2, alive, err := StartTicks(second.Process.Pid)
	if err != nil || !alive {
		t.Fatalf("StartTicks(second) alive=%v err=%v", alive, err)
	}
	if ticks2 < ticks1 {
		t.Fatalf("later process has earlier ticks: %d < %d", ticks2, ticks1)
	}

	// A reaped process has vanished.
	pid := first.Process.Pid
	_ = first.Process.Kill()
	_ = first.Wait()
	if _, alive, err := self().StartTicks(pid); err != nil || alive {
		t.Fatalf("StartTicks(reaped) alive=%v err=%v; want not alive, no error", alive, err)
	}
	// A pid above pid_max never existed.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if _, alive, err := Host().StartTicks(pidMax + 1); err != nil || alive {
		t.Fatalf("StartTicks(pid_max+1) alive=%v err=%v", alive, err)
	}
}

func TestNewScanner(t *testing.T) {
	if _, err := NewScanner("/proc"); err != nil {
		t.Fatalf("NewScanner(/proc): %v", err)
	}
	for _, root := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing"), "/proc/self/stat"} {
		if _, err := NewScanner(root); err == nil {
			t.Errorf("NewScanner(%s) accepted a root that is not a procfs", root)
		}
	}
	if _, err := NewScanner(fakeRoot(t, nil)); err != nil {
		t.Fatalf("NewScanner(fake root): %v", err)
	}
}

func TestUnreadableTableIsUnknown(t *testing.T) {
	t.Run("root removed", func(t *testing.T) {
		root := fakeRoot(t, map[string]string{
			"42/cmdline": "kube-scheduler\x00--v=2\x00",
			"42/stat":    statLine(42, "kube-schedule", 'S', 1, 500),
		})
		s, err := NewScanner(root)
		if err != nil {
			t.Fatal(err)
		}
		if ps, err := s.PIDs("kube-scheduler"); err != nil || !slices.Equal(ps, []Process{{42, 500}}) {
			t.Fatalf("fake PIDs = %v, %v", ps, err)
		}
		if err := os.RemoveAll(root); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PIDs("kube-scheduler"); err == nil {
			t.Error("PIDs on a removed root: no error")
		}
		if _, err := s.Running(Target{Name: "kube-scheduler", Binary: "kube-scheduler"}); err == nil {
			t.Error("Running on a removed root: no error")
		}
		if _, alive, err := s.StartTicks(42); err == nil {
			t.Errorf("StartTicks on a removed root: alive=%v, no error", alive)
		}
		if _, err := s.Mark(); err == nil {
			t.Error("Mark on a removed root: no error")
		}
	})
	t.Run("entry unreadable", func(t *testing.T) {
		// Root can read anything whatever its mode, so the unreadable
		// entry is one whose read fails with EISDIR: any error that is
		// not "no such process" must be unknown.
		root := fakeRoot(t, map[string]string{
			"42/stat":                statLine(42, "x", 'S', 1, 500),
			"42/cmdline/placeholder": "",
		})
		s, err := NewScanner(root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PIDs("kube-scheduler"); err == nil || !strings.Contains(err.Error(), "42/cmdline") {
			t.Fatalf("PIDs with an unreadable entry: %v, want an error naming it", err)
		}
	})
	t.Run("vanished entry is gone", func(t *testing.T) {
		root := fakeRoot(t, map[string]string{
			// Listed, but its files are missing: it exited mid-scan.
			"41/.keep":   "",
			"42/cmdline": "/usr/bin/kube-scheduler\x00",
			"42/stat":    statLine(42, "a) b (c", 'R', 1, 7),
			// A zombie's cmdline is empty; and a crafted one that still
			// has a name is gone by its state.
			"43/cmdline": "kube-scheduler\x00",
			"43/stat":    statLine(43, "kube-scheduler", 'Z', 1, 8),
			"44/cmdline": "kube-scheduler\x00",
			"44/stat":    statLine(44, ") Z (", 'X', 1, 9),
			// Matching cmdline but stat gone.
			"45/cmdline": "kube-scheduler\x00",
		})
		s, err := NewScanner(root)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := s.PIDs("kube-scheduler")
		if err != nil || !slices.Equal(ps, []Process{{42, 7}}) {
			t.Fatalf("PIDs = %v, %v; want [{42 7}]", ps, err)
		}
		for _, pid := range []int{41, 43, 44, 45, 46} {
			if _, alive, err := s.StartTicks(pid); err != nil || alive {
				t.Errorf("StartTicks(%d) alive=%v err=%v; want gone", pid, alive, err)
			}
		}
	})
	t.Run("garbled stat is unknown", func(t *testing.T) {
		root := fakeRoot(t, map[string]string{
			"42/cmdline": "kube-scheduler\x00",
			"42/stat":    "42 (kube-scheduler) S 1 2 3\n",
		})
		s, err := NewScanner(root)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PIDs("kube-scheduler"); err == nil {
			t.Error("PIDs with a truncated stat: no error")
		}
		if _, _, err := s.StartTicks(42); err == nil {
			t.Error("StartTicks with a truncated stat: no error")
		}
	})
}

func TestWithinFakeTree(t *testing.T) {
	// 1 -> 10 -> 20 -> 30 (kube-scheduler), 1 -> 11 (kube-scheduler),
	// 10 -> 21 whose parent 99 vanished (orphan in transition).
	root := fakeRoot(t, map[string]string{
		"10/cmdline": "sh\x00", "10/stat": statLine(10, "sh", 'S', 1, 1),
		"20/cmdline": "sh\x00", "20/stat": statLine(20, "sh", 'S', 10, 2),
		"30/cmdline": "kube-scheduler\x00", "30/stat": statLine(30, "kube-scheduler", 'S', 20, 3),
		"11/cmdline": "kube-scheduler\x00", "11/stat": statLine(11, "kube-scheduler", 'S', 1, 4),
		"21/cmdline": "kube-scheduler\x00", "21/stat": statLine(21, "kube-scheduler", 'S', 99, 5),
	})
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		scopes []int
		want   []int
	}{
		{nil, []int{11, 21, 30}},
		{[]int{1}, []int{11, 30}},
		{[]int{10}, []int{30}},
		{[]int{20}, []int{30}},
		{[]int{30}, []int{30}},
		{[]int{11}, []int{11}},
		{[]int{10, 11}, nil},
		{[]int{99}, []int{21}},
		{[]int{12345}, nil},
	} {
		sc := s
		for _, p := range tc.scopes {
			sc = sc.Within(p)
		}
		ps, err := sc.PIDs("kube-scheduler")
		if err != nil {
			t.Fatal(err)
		}
		if got := pidsOf(ps); !slices.Equal(got, tc.want) {
			t.Errorf("Within%v: %v, want %v", tc.scopes, got, tc.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		line string
		want procStat
		ok   bool
	}{
		{statLine(1, "systemd", 'S', 0, 12), procStat{'S', 0, 12}, true},
		{statLine(7, "a b) c (d", 'R', 3, 99), procStat{'R', 3, 99}, true},
		{statLine(7, ")", 'Z', 3, 18446744073709551615), procStat{'Z', 3, 18446744073709551615}, true},
		{strings.TrimSuffix(statLine(7, "x", 'S', 3, 42), "\n"), procStat{'S', 3, 42}, true},
		{"7 (x) S 3 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42", procStat{'S', 3, 42}, true},
		{"7 (x) S 3 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0", procStat{}, false},
		{"7 x S 3", procStat{}, false},
		{"7 (x) SS 3 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42", procStat{}, false},
		{"7 (x) S 3 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -42", procStat{}, false},
		{"", procStat{}, false},
	} {
		got, err := parseStat([]byte(tc.line))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v ok=%v", tc.line, got, err, tc.want, tc.ok)
		}
	}
}

func TestArgv0(t *testing.T) {
	long := strings.Repeat("d/", 3000) + "kube-apiserver"
	root := fakeRoot(t, map[string]string{
		"1/cmdline": long + "\x00--x\x00",
		"1/stat":    statLine(1, "kube-apiserver", 'S', 0, 1),
		"2/cmdline": "kube-apiserver --title rewritten", // no NUL at all
		"2/stat":    statLine(2, "kube-apiserver", 'S', 0, 1),
	})
	s, err := NewScanner(root)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := s.PIDs("kube-apiserver")
	if err != nil || !slices.Equal(pidsOf(ps), []int{1}) {
		t.Fatalf("PIDs = %v, %v; want [1] (long argv[0] found, rewritten argv not)", ps, err)
	}
}
