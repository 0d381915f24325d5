package kubebuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

func TestTool(t *testing.T) {
	tool, err := Tool("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(tool.Dir) != "kube-v1.37.2" || tool.Version != "Kubernetes v1.37.2" {
		t.Errorf("Tool(v1.37.2) = dir %s, version %q", tool.Dir, tool.Version)
	}
	for _, want := range []string{"gitVersion=v1.37.2", "gitMajor=1 ", "gitMinor=37 "} {
		if !strings.Contains(tool.LDFlags, want) {
			t.Errorf("ldflags %q lack %q", tool.LDFlags, want)
		}
	}
	if _, err := os.Stat(filepath.Join(tool.ModuleDir, "go.mod")); err != nil {
		t.Errorf("tool module: %v", err)
	}
	if _, err := Tool("v1.30.0"); err == nil || !strings.Contains(err.Error(), "known") {
		t.Errorf("Tool(v1.30.0) = %v, want an error listing the known versions", err)
	}
	// A kubeadm-only minor: its kubeadm builds, its control plane does not.
	if _, err := Tool("v1.34.4"); err == nil || !strings.Contains(err.Error(), "only its kubeadm") {
		t.Errorf("Tool(v1.34.4) = %v, want an error saying only its kubeadm is built", err)
	}
	if _, err := KubeadmTool("v1.34.4"); err != nil {
		t.Errorf("KubeadmTool(v1.34.4): %v", err)
	}
	if _, err := KubeadmTool("v1.30.0"); err == nil || !strings.Contains(err.Error(), "known: v1.34.4, v1.35.4, v1.36.3, v1.37.2") {
		t.Errorf("KubeadmTool(v1.30.0) = %v, want an error listing every kubeadm version", err)
	}
	if Minor("v1.37.2") != "1.37" {
		t.Errorf("Minor(v1.37.2) = %q", Minor("v1.37.2"))
	}
}

// TestBinaries checks each built version's binaries report their version;
// STRATUM_REAL=1 builds the missing ones (minutes), otherwise a version
// not built is skipped.
func TestBinaries(t *testing.T) {
	for _, v := range Versions {
		t.Run(v, func(t *testing.T) {
			if !Built(v) && os.Getenv("STRATUM_REAL") == "" {
				t.Skipf("kubernetes %s not built: make real-binaries, or STRATUM_REAL=1 to build it here", v)
			}
			bins, err := Binaries(context.Background(), v)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range Components {
				out, err := exec.Command(bins[c], "--version").CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "Kubernetes "+v {
					t.Errorf("%s --version = %q, %v", bins[c], out, err)
				}
			}
		})
	}
}

// TestToolProgramsIdentical: every tool module holds its own copy of flagdump
// (the control-plane versions only), kubeletuid, kubeadmetcd and, where it
// has one, the kubeletrules test (a module cannot import a package of
// another without a module dependency on it, and each must build against
// its own Kubernetes). The copies must not drift: a fix to one is a fix to
// all. kubeletuid's source.go and kubeletrules' source_test.go, the wiring
// of kubelet's file source, differ by minor as kubelet's API does.
func TestToolProgramsIdentical(t *testing.T) {
	root, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Glob(filepath.Join(root, "internal/harness/tools/*/kubeletrules/rules_test.go"))
	if err != nil || len(rules) < 2 {
		t.Fatalf("kubeletrules tests: %v, %v", rules, err)
	}
	for _, prog := range []struct {
		name  string
		files []string
	}{
		{"flagdump", toolFiles(t, Versions, "flagdump/main.go")},
		{"kubeletuid", toolFiles(t, KubeadmVersions(), "kubeletuid/main.go")},
		{"kubeadmetcd", toolFiles(t, KubeadmVersions(), "kubeadmetcd/main.go")},
		{"kubeletrules", rules},
	} {
		first, err := os.ReadFile(prog.files[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range prog.files[1:] {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != string(first) {
				t.Errorf("%s: %s differs from %s: copy the fixed one over the other", prog.name, f, prog.files[0])
			}
		}
	}
}

// toolFiles is the file rel of each version's tool module.
func toolFiles(t *testing.T, versions []string, rel string) []string {
	t.Helper()
	var files []string
	for _, v := range versions {
		tool, err := moduleTool(v)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.Join(tool.ModuleDir, rel))
	}
	return files
}

// TestKubeadmBinaries checks each version's kubeadm build, the
// kubeadm-only minors' included: its own cache entry beside the control
// plane's, every program reporting the version. STRATUM_REAL=1 builds a
// missing one (about a minute once the control plane is built, minutes
// for a kubeadm-only minor), otherwise a version not built is skipped.
func TestKubeadmBinaries(t *testing.T) {
	for _, v := range KubeadmVersions() {
		t.Run(v, func(t *testing.T) {
			tool, err := KubeadmTool(v)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := moduleTool(v)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(tool.Dir) != "kubeadm-"+v || filepath.Dir(tool.Dir) != filepath.Dir(cp.Dir) {
				t.Fatalf("kubeadm cache entry %s, want kubeadm-%s beside %s", tool.Dir, v, cp.Dir)
			}
			if !KubeadmBuilt(v) && os.Getenv("STRATUM_REAL") == "" {
				t.Skipf("kubeadm %s not built: STRATUM_REAL=1 to build it here", v)
			}
			bins, err := KubeadmBinaries(context.Background(), v)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bins["kubeadm"], "version", "-o", "short").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != v {
				t.Errorf("kubeadm version -o short = %q, %v", out, err)
			}
			for _, p := range []string{"kubeletuid", "kubeadmetcd"} {
				out, err := exec.Command(bins[p], "--version").CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "Kubernetes "+v {
					t.Errorf("%s --version = %q, %v", p, out, err)
				}
			}
		})
	}
}
