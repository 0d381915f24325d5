//go:build stratumfault

package fault

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// The child mode: hit the points named on the command line in order, then
// exit 0. Armed points SIGKILL it on the way.
func TestMain(m *testing.M) {
	if pts := os.Getenv("FAULT_TEST_CHILD"); pts != "" {
		for _, p := range strings.Split(pts, ",") {
			os.Stdout.WriteString("reached " + p + "\n")
			Hit(Point(p))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(t *testing.T, armed string, points ...string) (string, bool) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "FAULT_TEST_CHILD="+strings.Join(points, ","), EnvVar+"="+armed)
	out, _ := cmd.Output()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	return string(out), ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestHit(t *testing.T) {
	cases := []struct {
		armed     string
		killed    bool
		lastReach string
	}{
		{"", false, "c"},
		{"b", true, "b"},
		{"x,c", true, "c"},
		{"a#2", true, "a"}, // second hit of a
		{"b#2", false, "c"},
	}
	for _, c := range cases {
		out, killed := runChild(t, c.armed, "a", "b", "a", "c")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := strings.TrimPrefix(lines[len(lines)-1], "reached ")
		if killed != c.killed || last != c.lastReach {
			t.Errorf("STRATUM_FAULT=%q: killed %v at %q, want killed %v at %q", c.armed, killed, last, c.killed, c.lastReach)
		}
		if c.armed == "a#2" && len(lines) != 3 {
			t.Errorf("a#2 fired at hit %d of a", len(lines))
		}
	}
}

func TestEnabledWithTag(t *testing.T) {
	if !Enabled {
		t.Fatal("Enabled is false in a stratumfault build")
	}
}
