// Package kubebuild provides the real Kubernetes control-plane binaries for
// the test bed: kube-apiserver, kube-controller-manager and kube-scheduler
// built from the k8s.io/kubernetes module at a pinned version, each minor
// in a nested tool module of its own (internal/harness/tools/kube1xx, every
// staging module replaced by its published v0.x), cached so that a rerun
// does not rebuild.
//
// The binaries of a version live at <cache>/kube-<version>/<component>,
// where <cache> is build.CacheDir. The three are built by one go build, so
// the packages they share compile once; see build.Tool for the lock and
// the rename into place. A version's kubeadm and its helper programs
// (KubeadmTools) are a cache entry of their own, <cache>/kubeadm-<version>/
// (KubeadmTool), so that adding them invalidated no control-plane build;
// the older minors of KubeadmOnlyVersions have that entry only.
package kubebuild

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// Components are the binaries built for each version, by component name.
var Components = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// Versions are the Kubernetes versions whose control plane can be built
// (and whose kubeadm too), oldest first: the test bed runs them.
var Versions = []string{"v1.36.3", "v1.37.2"}

// KubeadmOnlyVersions are the older supported minors, oldest first, of
// which only kubeadm and its helper programs are built (KubeadmTool): the
// kubeadm fixtures need them, the test bed does not run their control
// plane, and building it would cost CI about 11 minutes each.
var KubeadmOnlyVersions = []string{"v1.34.4", "v1.35.4"}

// KubeadmVersions are the versions with a kubeadm build, oldest first:
// KubeadmOnlyVersions, then Versions.
func KubeadmVersions() []string { return slices.Concat(KubeadmOnlyVersions, Versions) }

// toolDirs are the tool modules of the versions, relative to the
// repository root.
var toolDirs = map[string]string{
	"v1.34.4": "internal/harness/tools/kube134",
	"v1.35.4": "internal/harness/tools/kube135",
	"v1.36.3": "internal/harness/tools/kube136",
	"v1.37.2": "internal/harness/tools/kube137",
}

// BuildTimeout bounds the go build of one version's three binaries: about
// 11 minutes from a cold build cache on 2 cores.
const BuildTimeout = 30 * time.Minute

// Tool is the build of version's binaries, one of Versions.
func Tool(version string) (build.Tool, error) {
	if slices.Contains(KubeadmOnlyVersions, version) {
		return build.Tool{}, fmt.Errorf("kubernetes %s: only its kubeadm is built, not its control plane (control planes: %s)", version, strings.Join(Versions, ", "))
	}
	if !slices.Contains(Versions, version) {
		return build.Tool{}, fmt.Errorf("kubernetes %q: no such build (known: %s)", version, strings.Join(Versions, ", "))
	}
	return moduleTool(version)
}

// moduleTool is the build of the control plane from version's tool
// module, for any version of toolDirs.
func moduleTool(version string) (build.Tool, error) {
	dir, ok := toolDirs[version]
	if !ok {
		return build.Tool{}, fmt.Errorf("kubernetes %q: no tool module (known: %s)", version, strings.Join(KubeadmVersions(), ", "))
	}
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	cache, err := build.CacheDir()
	if err != nil {
		return build.Tool{}, err
	}
	root, err := build.RepoRoot()
	if err != nil {
		return build.Tool{}, err
	}
	pkgs := make([]string, len(Components))
	for i, c := range Components {
		pkgs[i] = "k8s.io/kubernetes/cmd/" + c
	}
	const v = "k8s.io/component-base/version."
	return build.Tool{
		Name:      "kubernetes " + version,
		Dir:       filepath.Join(cache, "kube-"+version),
		ModuleDir: filepath.Join(root, dir),
		Packages:  pkgs,
		Binaries:  Components,
		LDFlags: "-s -w -X " + v + "gitVersion=" + version + " -X " + v + "gitMajor=" + major +
			" -X " + v + "gitMinor=" + minor + " -X " + v + "gitTreeState=clean",
		Version: "Kubernetes " + version,
		Timeout: BuildTimeout,
	}, nil
}

// Binaries returns the path of each component's binary of version
// (component name -> path), building them first if the cache lacks any.
func Binaries(ctx context.Context, version string) (map[string]string, error) {
	t, err := Tool(version)
	if err != nil {
		return nil, err
	}
	if _, err := t.Build(ctx); err != nil {
		return nil, err
	}
	return t.Paths(), nil
}

// Built reports whether version's binaries are all in the cache, without
// building: for tests that skip when they are not.
func Built(version string) bool {
	t, err := Tool(version)
	if err != nil {
		return false
	}
	ok, err := t.Built()
	return ok && err == nil
}

// Paths are where version's binaries are (or would be) cached, built or not.
func Paths(version string) (map[string]string, error) {
	t, err := Tool(version)
	if err != nil {
		return nil, err
	}
	return t.Paths(), nil
}

// Minor is "1.37" for "v1.37.2".
func Minor(version string) string {
	v := strings.TrimPrefix(version, "v")
	if i := strings.LastIndex(v, "."); i > 0 {
		return v[:i]
	}
	return v
}
