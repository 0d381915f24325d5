package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

const module = "github.com/ciq/stratum-upgrade"

// productPackages are the library's packages: none may reach into
// internal/, so that arrows point down only (cmd -> cli -> engine -> ...).
var productPackages = []string{"nodestate", "manifest", "proc", "snapshot", "etcddata", "journal", "engine", "durable", "fault"}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	root, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}

// The command links neither the test harness nor package testing.
func TestBinaryLinksNoHarness(t *testing.T) {
	for _, dep := range goList(t, "-deps", "./cmd/stratum-upgrade") {
		if dep == "testing" || strings.HasPrefix(dep, module+"/internal/harness") {
			t.Errorf("stratum-upgrade links %s", dep)
		}
	}
}

// Product packages import nothing under internal/.
func TestProductImportsNoInternal(t *testing.T) {
	for _, p := range productPackages {
		for _, dep := range goList(t, "-deps", "./"+p) {
			if strings.HasPrefix(dep, module+"/internal/") {
				t.Errorf("%s depends on %s", p, dep)
			}
		}
	}
}

// The release binary cannot arm a fault point: the variable's name is not
// even in it. The tagged build (the crash tests') has it.
func TestReleaseBinaryHasNoFaultSwitch(t *testing.T) {
	t.Parallel() // two go builds, while the test bed tests wait
	for _, faults := range []bool{false, true} {
		bin, err := build.StratumUpgrade(faults)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if has := bytes.Contains(b, []byte(build.FaultEnv)); has != faults {
			t.Errorf("binary built with faults=%v contains %s: %v", faults, build.FaultEnv, has)
		}
	}
}
