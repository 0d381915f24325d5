package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/runbin"
	"github.com/ciq/stratum-upgrade/proc"
)

// crowdSize is how many sleeping processes BenchmarkPIDsCrowded spawns.
const crowdSize = 10000

// crowdSource is the sleeper: it forks n children that pause until killed
// and reports "ready n" on stdout. Each child asks for SIGKILL when its
// parent dies, and the parent for SIGKILL when the benchmark dies and exits
// when its stdin closes; so the whole crowd goes away with the benchmark
// whichever way it ends. The crowd is also one process group, which the
// cleanup kills.
const crowdSource = `#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
	if (argc != 2) return 2;
	int n = atoi(argv[1]);
	pid_t parent = getpid();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (int i = 0; i < n; i++) {
		pid_t p = fork();
		if (p < 0) { perror("fork"); return 1; }
		if (p == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent) _exit(0);
			for (;;) pause();
		}
	}
	printf("ready %d\n", n);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0) {}
	return 0;
}
`

// crowd is a running group of sleepers.
type crowd struct {
	name    string // argv[0] of every sleeper
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	once    sync.Once
	stopErr error
}

// buildSleeper compiles crowdSource with the C compiler into dir.
func buildSleeper(dir string) (string, error) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("no C compiler (cc) to build the sleeper: %w", err)
	}
	src := filepath.Join(dir, "sleeper.c")
	if err := os.WriteFile(src, []byte(crowdSource), 0o644); err != nil {
		return "", err
	}
	// A name of this run's own, so that no other process counts.
	bin := filepath.Join(dir, "stratum-bench-sleeper-"+strconv.Itoa(os.Getpid()))
	if out, err := exec.Command(cc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc: %v\n%s", err, out)
	}
	return bin, nil
}

// crowdRoom checks that n more processes fit: pid_max and threads-max leave
// room for them with a margin of 2,000 over what runs now, and memory for
// about 64 KiB each plus 1 GiB.
func crowdRoom(n int) error {
	read := func(p string) (int, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(strings.TrimSpace(string(b)))
	}
	pidMax, err := read("/proc/sys/kernel/pid_max")
	if err != nil {
		return err
	}
	threadsMax, err := read("/proc/sys/kernel/threads-max")
	if err != nil {
		return err
	}
	la, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err
	}
	f := strings.Fields(string(la))
	if len(f) < 4 {
		return fmt.Errorf("/proc/loadavg: %q", la)
	}
	_, total, _ := strings.Cut(f[3], "/")
	tasks, err := strconv.Atoi(total)
	if err != nil {
		return fmt.Errorf("/proc/loadavg: %q", la)
	}
	if need := tasks + n + 2000; need > pidMax || need > threadsMax {
		return fmt.Errorf("%d tasks run, %d more need pid_max and threads-max >= %d (they are %d and %d)", tasks, n, need, pidMax, threadsMax)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(6 /* RLIMIT_NPROC */, &rl); err == nil && os.Geteuid() != 0 && rl.Cur != ^uint64(0) && uint64(tasks+n+2000) > rl.Cur {
		return fmt.Errorf("RLIMIT_NPROC %d leaves no room for %d more processes", rl.Cur, n)
	}
	mi, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				return fmt.Errorf("/proc/meminfo: %q", line)
			}
			if need := n*64 + 1<<20; kb < need {
				return fmt.Errorf("%d KiB of memory available, %d processes want %d KiB", kb, n, need)
			}
		}
	}
	return nil
}

// startCrowd starts n sleepers and waits (at most timeout) until all of
// them run. Their cleanup is registered with tb before anything starts: it
// closes the parent's stdin, kills the process group and waits until no
// sleeper is left, failing tb if one survives.
func startCrowd(tb testing.TB, bin string, n int, timeout time.Duration) *crowd {
	tb.Helper()
	c := &crowd{name: filepath.Base(bin)}
	c.cmd = exec.Command(bin, strconv.Itoa(n))
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.cmd.Stderr = os.Stderr
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	c.stdin = stdin
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.stop(30 * time.Second); err != nil {
			tb.Error(err)
		}
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready "+strconv.Itoa(n) {
			err = fmt.Errorf("sleeper said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			tb.Fatalf("starting %d sleepers: %v", n, err)
		}
	case <-time.After(timeout):
		tb.Fatalf("starting %d sleepers: not ready after %s", n, timeout)
	}
	return c
}

// stop ends the crowd and waits until none of its processes runs; a
// second call returns the first one's result.
func (c *crowd) stop(timeout time.Duration) error {
	c.once.Do(func() { c.stopErr = c.kill(timeout) })
	return c.stopErr
}

func (c *crowd) kill(timeout time.Duration) error {
	c.stdin.Close()
	pgid := c.cmd.Process.Pid
	_ = runbin.KillGroup(c.cmd)
	_ = c.cmd.Wait()
	t := proc.Target{Name: "the sleepers", Binary: c.name}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		ps, err := proc.PIDs(c.name)
		if err == nil && len(ps) == 0 {
			return nil
		}
		for _, p := range ps {
			// Only ours: the name is this benchmark's own and every sleeper
			// is in the group; kill stragglers one by one as well.
			if pg, err := syscall.Getpgid(p.PID); err == nil && pg == pgid {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to exit: %d still run after %s", t.Name, len(ps), timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// BenchmarkPIDsCrowded times proc.Host().PIDs against `pgrep -f` on a node
// crowded with 10,000 extra sleeping processes, in the same run, each
// several times alternately; it reports the medians and their ratio. pgrep
// is timed as a command (fork, exec, scan, exit), as a script or an
// operator would run it; the cost of starting it (pgrep matching nothing
// on an empty /proc is not possible, so `pgrep --version`) is reported
// too.
func BenchmarkPIDsCrowded(b *testing.B) {
	pgrep, err := exec.LookPath("pgrep")
	if err != nil {
		b.Skip("no pgrep on this machine")
	}
	if err := crowdRoom(crowdSize); err != nil {
		b.Skipf("no room for %d processes: %v", crowdSize, err)
	}
	bin, err := buildSleeper(b.TempDir())
	if err != nil {
		b.Skip(err)
	}
	t0 := time.Now()
	c := startCrowd(b, bin, crowdSize, 2*time.Minute)
	spawn := time.Since(t0)
	s := proc.Host()
	ps, err := s.PIDs(c.name)
	if err != nil {
		b.Fatal(err)
	}
	if len(ps) != crowdSize+1 {
		b.Fatalf("PIDs found %d sleepers, want %d", len(ps), crowdSize+1)
	}
	total := 0
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				total++
			}
		}
	}
	const rounds = 9
	var ours, theirs, start []time.Duration
	for range rounds {
		t := time.Now()
		if _, err := s.PIDs("kube-scheduler"); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(t))
		t = time.Now()
		out, err := exec.Command(pgrep, "-f", "kube-scheduler").Output()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
			b.Fatalf("pgrep: %v %s", err, out)
		}
		theirs = append(theirs, time.Since(t))
		t = time.Now()
		if err := exec.Command(pgrep, "--version").Run(); err != nil {
			b.Fatal(err)
		}
		start = append(start, time.Since(t))
	}
	if err := c.stop(30 * time.Second); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total), "procs")
	b.ReportMetric(ms(spawn), "spawn-ms")
	b.ReportMetric(ms(median(ours)), "pids-ms")
	b.ReportMetric(ms(median(theirs)), "pgrep-ms")
	b.ReportMetric(ms(median(start)), "pgrep-start-ms")
	b.ReportMetric(float64(median(ours))/float64(median(theirs)), "pids/pgrep")
}

// TestCrowdCleanup proves the crowd machinery leaves nothing behind: a
// small crowd starts, is found, and is gone after stop.
func TestCrowdCleanup(t *testing.T) {
	bin, err := buildSleeper(t.TempDir())
	if err != nil {
		t.Skip(err)
	}
	c := startCrowd(t, bin, 50, 30*time.Second)
	ps, err := proc.PIDs(c.name)
	if err != nil || len(ps) != 51 {
		t.Fatalf("PIDs of the crowd: %d processes, %v; want 51", len(ps), err)
	}
	if err := c.stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	ps, err = proc.PIDs(c.name)
	if err != nil || len(ps) != 0 {
		t.Fatalf("after stop: %v %v", ps, err)
	}
	if c.cmd.ProcessState == nil {
		t.Fatal("the sleeper's parent was not reaped")
	}
}
