package testbed

import (
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFreePortsOutsideEphemeralRange pins why FreePorts exists: its ports
// are distinct, never handed out twice, bindable, and outside the range
// the kernel picks local ports of outgoing connections from.
func TestFreePortsOutsideEphemeralRange(t *testing.T) {
	lo, hi := portRange()
	seen := map[int]bool{}
	for range 20 {
		ports, err := FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if p < lo || p >= hi {
				t.Errorf("port %d is outside %d-%d", p, lo, hi)
			}
			if seen[p] {
				t.Errorf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	if err != nil {
		t.Fatalf("port %d is not free: %v", ports[0], err)
	}
	l.Close()
	ephemeral := probeEphemeral(t)
	if ephemeral >= lo && ephemeral < hi {
		t.Errorf("the kernel handed out %d for :0, inside FreePorts' range %d-%d", ephemeral, lo, hi)
	}
}

func probeEphemeral(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// claimChildEnv makes this test binary the other test process of
// TestFreePortsNotSharedAcrossProcesses: FreePorts(3) in the range it
// names, the ports printed, then it lives until its stdin closes.
const claimChildEnv = "TESTBED_PORTS_CHILD"

// Two test processes (go test runs packages in parallel) never get the
// same port while both live: in a range of five ports, a child takes
// three; the parent gets two others and no third; once the child is gone,
// its ports are free again.
func TestFreePortsNotSharedAcrossProcesses(t *testing.T) {
	if v := os.Getenv(claimChildEnv); v != "" {
		lo, _ := strconv.Atoi(v)
		portRangeOf = func() (int, int) { return lo, lo + 5 }
		ports, err := FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(ports[0], ports[1], ports[2])
		io.Copy(io.Discard, os.Stdin)
		return
	}
	lo := fiveFreePorts(t)
	defer func(f func() (int, int)) { portRangeOf = f }(portRangeOf)
	portRangeOf = func() (int, int) { return lo, lo + 5 }

	cmd := exec.Command(os.Args[0], "-test.run=^TestFreePortsNotSharedAcrossProcesses$")
	cmd.Env = append(os.Environ(), claimChildEnv+"="+strconv.Itoa(lo))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	var child [3]int
	if _, err := fmt.Fscan(stdout, &child[0], &child[1], &child[2]); err != nil {
		t.Fatalf("the child printed no ports: %v", err)
	}
	theirs := map[int]bool{child[0]: true, child[1]: true, child[2]: true}

	mine, err := FreePorts(2)
	if err != nil {
		t.Fatalf("two of the five ports are not the child's, yet: %v", err)
	}
	for _, p := range mine {
		if theirs[p] {
			t.Errorf("port %d handed out here while the child holds it (the child has %v)", p, child)
		}
	}
	if more, err := FreePorts(1); err == nil {
		t.Errorf("a sixth port %v out of five: the child's %v, mine %v", more, child, mine)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child: %v", err)
	}
	for p := range theirs {
		f, err := claimPort(p)
		if err != nil || f == nil {
			t.Errorf("port %d still claimed after the child ended: %v", p, err)
			continue
		}
		f.Close()
	}
}

// fiveFreePorts finds five consecutive ports inside FreePorts' range that
// nobody listens on and no test process has claimed, and returns the
// first.
func fiveFreePorts(t *testing.T) int {
	t.Helper()
	lo, hi := portRange()
	for base := lo + mrand.IntN(hi-lo-1000); base < hi-5; base += 5 {
		ok := true
		for p := base; p < base+5 && ok; p++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			l.Close()
			if f, err := claimPort(p); err != nil || f == nil {
				ok = false
			} else {
				f.Close()
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no five consecutive free ports")
	return 0
}

// FreePorts never hands out the ports kubeadm's manifests pin (10257,
// 10259): cmd/stratum-upgrade's TestAdoptKubeadmOnTestBed runs them beside
// other nodes.
func TestFreePortsLeaveKubeadmsPorts(t *testing.T) {
	defer func(f func() (int, int)) { portRangeOf = f }(portRangeOf)
	portRangeOf = func() (int, int) { return 10256, 10260 }
	var got []int
	for {
		ports, err := FreePorts(1)
		if err != nil {
			break // the range is spent
		}
		got = append(got, ports...)
	}
	for _, p := range got {
		if p == 10257 || p == 10259 {
			t.Errorf("FreePorts handed out %d, a port kubeadm's manifests pin (got %v)", p, got)
		}
	}
}

// fakeTB records what HoldPorts does to its test: its cleanups, and a
// Fatalf, which ends the call (as t.Fatalf ends the test) through a panic
// that hold recovers.
type fakeTB struct {
	TB
	cleanups []func()
	fatal    string
}

type fatalPanic struct{}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	panic(fatalPanic{})
}
func (f *fakeTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

// hold runs HoldPorts on a new fakeTB and returns it.
func hold(timeout time.Duration, ports ...int) (f *fakeTB) {
	f = &fakeTB{}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatalPanic); !ok {
				panic(r)
			}
		}
	}()
	HoldPorts(f, timeout, ports...)
	return f
}

// A port held by one test is not held by another until the first ends;
// the second waits for it, and says so when it waits too long.
func TestHoldPortsOneTestAtATime(t *testing.T) {
	// Port numbers below FreePorts' range: a hold is a name, no bind.
	first := hold(time.Second, 7, 9)
	if first.fatal != "" {
		t.Fatal(first.fatal)
	}
	second := hold(300*time.Millisecond, 9)
	if !strings.Contains(second.fatal, "port 9: another test held it for over 300ms") {
		t.Errorf("a second hold of a held port: %q, want it to time out naming the port", second.fatal)
	}
	done := make(chan *fakeTB)
	go func() { done <- hold(10*time.Second, 9) }()
	time.Sleep(300 * time.Millisecond)
	first.end()
	third := <-done
	if third.fatal != "" {
		t.Errorf("the hold after the first ended: %s", third.fatal)
	}
	third.end()
}
