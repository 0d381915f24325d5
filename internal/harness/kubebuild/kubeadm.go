package kubebuild

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// KubeadmTools are the programs of a version's kubeadm build, all from its
// tool module: kubeadm itself (k8s.io/kubernetes/cmd/kubeadm), kubeletuid
// (the pod UIDs kubelet's own file source computes for a manifest
// directory) and kubeadmetcd (the etcd manifest kubeadm join writes, from
// kubeadm's own code). See the programs' doc comments.
var KubeadmTools = []string{"kubeadm", "kubeletuid", "kubeadmetcd"}

// KubeadmTool is the build of version's KubeadmTools (any of
// KubeadmVersions) into <cache>/kubeadm-<version>/, a cache entry of its
// own: the control-plane binaries of <cache>/kube-<version>/ stay as they
// are, and the packages the two builds share come from Go's build cache
// (same module, flags and -ldflags). The lock, the --version check (kubeadm's is `kubeadm version
// -o short`) and the rename into place are build.Tool's.
func KubeadmTool(version string) (build.Tool, error) {
	if !slices.Contains(KubeadmVersions(), version) {
		return build.Tool{}, fmt.Errorf("kubeadm %q: no such build (known: %s)", version, strings.Join(KubeadmVersions(), ", "))
	}
	t, err := moduleTool(version)
	if err != nil {
		return build.Tool{}, err
	}
	t.Name = "kubeadm " + version
	t.Dir = filepath.Join(filepath.Dir(t.Dir), "kubeadm-"+version)
	t.Packages = []string{"k8s.io/kubernetes/cmd/kubeadm", "./kubeletuid", "./kubeadmetcd"}
	t.Binaries = KubeadmTools
	t.Version = version
	t.VersionArgs = map[string][]string{"kubeadm": {"version", "-o", "short"}}
	return t, nil
}

// KubeadmBinaries returns the path of each of version's KubeadmTools
// (name -> path), building them first if the cache lacks any.
func KubeadmBinaries(ctx context.Context, version string) (map[string]string, error) {
	t, err := KubeadmTool(version)
	if err != nil {
		return nil, err
	}
	if _, err := t.Build(ctx); err != nil {
		return nil, err
	}
	return t.Paths(), nil
}

// Kubeadm returns the path of version's kubeadm, building it (and the
// other KubeadmTools) first if the cache lacks it.
func Kubeadm(ctx context.Context, version string) (string, error) {
	bins, err := KubeadmBinaries(ctx, version)
	if err != nil {
		return "", err
	}
	return bins["kubeadm"], nil
}

// KubeadmBuilt reports whether version's KubeadmTools are all in the
// cache, without building.
func KubeadmBuilt(version string) bool {
	t, err := KubeadmTool(version)
	if err != nil {
		return false
	}
	ok, err := t.Built()
	return ok && err == nil
}
