package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// EnvKubeletRules set to "all" runs TestKubeletRules in every tool module
// that has a kubeletrules test, not only those of Kubelets.
const EnvKubeletRules = "STRATUM_KUBELET_RULES"

// TestKubeletRules runs the kubeletrules test of every tool module that
// has one (internal/harness/tools/*/kubeletrules): kubeletpod.Check's
// cases through that version's real kubelet code. It builds with the
// kubelets' flags (-trimpath, CGO_ENABLED=0), so the packages the kubelet
// builds compiled are reused.
func TestKubeletRules(t *testing.T) {
	requireE2E(t)
	root, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := filepath.Glob(filepath.Join(root, "internal/harness/tools/*/kubeletrules"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no kubeletrules test in the tool modules: %v", err)
	}
	// The kubelets the e2e runs (by default, and those KUBELET selects)
	// are built anyway (their modules are in the cache); the other minors'
	// kubelet code is a module download and a compile of kubelet's
	// packages each (3-5 minutes cold), so they run when EnvKubeletRules
	// is "all" (make kubelet-rules), not in CI.
	byDefault, _, _ := SelectKubelets("")
	selected, _, err := kubeletsFor()
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for _, k := range append(byDefault, selected...) {
		runs[filepath.Join(root, k.ToolDir)] = true
	}
	all := os.Getenv(EnvKubeletRules) == "all"
	for _, d := range dirs {
		module := filepath.Dir(d)
		t.Run(filepath.Base(module), func(t *testing.T) {
			if !runs[module] && !all {
				t.Skipf("kubelet of %s: not one the e2e runs; %s=all (make kubelet-rules) runs it", filepath.Base(module), EnvKubeletRules)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
			defer cancel()
			start := time.Now()
			cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-trimpath", "-v", "./kubeletrules")
			cmd.Dir = module
			cmd.Env = append(cmd.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go test ./kubeletrules in %s (timeout 20m): %v\n%s", module, err, out)
			}
			t.Logf("%s: kubelet's code agrees with every case, in %s:\n%s", filepath.Base(module), time.Since(start).Round(time.Second), out)
		})
	}
}
