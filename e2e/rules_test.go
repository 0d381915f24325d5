package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

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
	for _, d := range dirs {
		module := filepath.Dir(d)
		t.Run(filepath.Base(module), func(t *testing.T) {
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
