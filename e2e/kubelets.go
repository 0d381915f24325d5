package e2e

// This file holds the kubelets the end-to-end tests run, one per supported
// kubelet minor that has a build here, and how a run picks among them.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// Kubelet is one kubelet version the end-to-end tests build and run.
type Kubelet struct {
	// Version is kubelet's own ("v1.37.2").
	Version string
	// ToolDir is the nested module that builds it, relative to the
	// repository root: each requires k8s.io/kubernetes at Version and
	// replaces every staging module by its published v0.x (go install
	// refuses k8s.io/kubernetes' own replace directives).
	ToolDir string
	// OnlyWhenSelected keeps it out of a run that selects no kubelet (make
	// e2e-kubelet's default, CI's): it runs only when EnvKubelet names it,
	// so a kubelet checked once by hand adds no CI time.
	OnlyWhenSelected bool
}

// Kubelets are the kubelets of make e2e-kubelet, newest first. The newest
// runs every scenario; the others run the scenarios that lean on kubelet's
// internals most (upgrade, rollback, kill and resume: fullOnly is false),
// unless KUBELET selects one of them for a run of its own. 1.37.2 is built
// in the 1.37 control plane's tool module (its packages compile once for
// both); 1.34.4 has a module of its own; 1.35.4 is built in the 1.35
// kubeadm's module and runs only when selected (docs/e2e.md has its run).
var Kubelets = []Kubelet{
	{Version: "v1.37.2", ToolDir: "internal/harness/tools/kube137"},
	{Version: "v1.35.4", ToolDir: "internal/harness/tools/kube135", OnlyWhenSelected: true},
	{Version: "v1.34.4", ToolDir: "internal/harness/tools/kubelet"},
}

// EnvKubelet selects kubelets for a run: a version ("v1.34.4"), a minor
// ("1.34"), or several separated by commas. Unset or empty: every one of
// Kubelets but those OnlyWhenSelected. A selected kubelet runs every
// scenario.
const EnvKubelet = "KUBELET"

// KubeletBuildTimeout bounds one go build of kubelet: about 3.5 minutes on
// 2 cores from a cold build cache, plus the module download.
const KubeletBuildTimeout = 20 * time.Minute

// SelectKubelets is the kubelets sel (EnvKubelet's value) names, in the
// order of Kubelets, and whether sel named them (a run that selected a
// kubelet runs every scenario under it); sel empty is the kubelets not
// OnlyWhenSelected. An unknown name is an error that lists the known
// versions.
func SelectKubelets(sel string) (ks []Kubelet, selected bool, err error) {
	sel = strings.TrimSpace(sel)
	if sel == "" {
		for _, k := range Kubelets {
			if !k.OnlyWhenSelected {
				ks = append(ks, k)
			}
		}
		return ks, false, nil
	}
	want := map[int]bool{}
	for _, name := range strings.Split(sel, ",") {
		name = strings.TrimPrefix(strings.TrimSpace(name), "v")
		found := false
		for i, k := range Kubelets {
			v := strings.TrimPrefix(k.Version, "v")
			if name == v || name == minorOf(v) {
				want[i], found = true, true
			}
		}
		if !found {
			return nil, false, fmt.Errorf("%s=%q: no kubelet %q here (known: %s)", EnvKubelet, sel, name, strings.Join(kubeletVersions(), ", "))
		}
	}
	for i, k := range Kubelets {
		if want[i] {
			ks = append(ks, k)
		}
	}
	return ks, true, nil
}

// minorOf is "1.37" for "1.37.2".
func minorOf(v string) string {
	if i := strings.LastIndex(v, "."); i > 0 {
		return v[:i]
	}
	return v
}

func kubeletVersions() []string {
	out := make([]string, len(Kubelets))
	for i, k := range Kubelets {
		out[i] = k.Version
	}
	return out
}

// Tool is the build of k: <cache>/kubelet-<version>/kubelet, one go build
// of k8s.io/kubernetes/cmd/kubelet in k's tool module with
// CGO_ENABLED=0 and the version in -ldflags, checked with --version,
// renamed into place under a lock (build.Tool), so concurrent callers
// build once and nobody runs a partial binary.
func (k Kubelet) Tool() (build.Tool, error) {
	cache, err := CacheDir()
	if err != nil {
		return build.Tool{}, err
	}
	root, err := build.RepoRoot()
	if err != nil {
		return build.Tool{}, err
	}
	major, minor, _ := strings.Cut(minorOf(strings.TrimPrefix(k.Version, "v")), ".")
	const v = "k8s.io/component-base/version."
	return build.Tool{
		Name:      "kubelet " + k.Version,
		Dir:       filepath.Join(cache, "kubelet-"+k.Version),
		ModuleDir: filepath.Join(root, k.ToolDir),
		Packages:  []string{"k8s.io/kubernetes/cmd/kubelet"},
		Binaries:  []string{"kubelet"},
		LDFlags: "-s -w -X " + v + "gitVersion=" + k.Version + " -X " + v + "gitMajor=" + major +
			" -X " + v + "gitMinor=" + minor + " -X " + v + "gitTreeState=clean",
		Version: "Kubernetes " + k.Version,
		Timeout: KubeletBuildTimeout,
	}, nil
}

// KubeletBinary returns the path of k's kubelet binary, building it first
// if the cache does not hold it; built reports whether this call built it.
// On error nothing is left at the binary's path.
func KubeletBinary(ctx context.Context, k Kubelet) (path string, built bool, err error) {
	t, err := k.Tool()
	if err != nil {
		return "", false, err
	}
	if built, err = t.Build(ctx); err != nil {
		return "", false, err
	}
	return t.Paths()["kubelet"], built, nil
}

// kubeletsFor is the kubelets of this run (EnvKubelet) and whether the
// run selected them.
func kubeletsFor() ([]Kubelet, bool, error) { return SelectKubelets(os.Getenv(EnvKubelet)) }
