// Package etcdbuild provides real etcd binaries for the test bed: etcd's own
// server main built from the go.etcd.io/etcd/server/v3 module at a pinned
// version (the nested modules under internal/harness/tools/etcd3*), cached so that a
// rerun does not rebuild.
//
// A binary lives at <cache>/etcd-<module version>/etcd, where <cache> is
// $STRATUM_CACHE or, unset, $HOME/.cache/stratum-upgrade. It is built to a
// temporary name and renamed into place, under an exclusive lock file, so
// concurrent test processes build it once and never run a partial binary.
package etcdbuild

import (
	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Build is one buildable etcd.
type Build struct {
	// Minor is the etcd minor version: "3.5", "3.6" or "3.7".
	Minor string
	// ModuleVersion is the go.etcd.io/etcd/server/v3 version in the tool
	// module's go.mod.
	ModuleVersion string
	// Image is the image reference the test bed maps to this binary: the
	// kubeadm image of the same etcd version.
	Image string
	// ToolDir is the tool module, relative to the repository root.
	ToolDir string
}

// Builds is every etcd the test bed can run, oldest first. An upgrade test
// goes from Builds[0] to Builds[1]. 3.5.35 is the newest 3.5 the module
// proxy serves; an upgrade to 3.6 needs at least 3.5.32.
var Builds = []Build{
	{Minor: "3.5", ModuleVersion: "v3.5.35", Image: "registry.k8s.io/etcd:3.5.35-0", ToolDir: "internal/harness/tools/etcd35"},
	{Minor: "3.6", ModuleVersion: "v3.6.16", Image: "registry.k8s.io/etcd:3.6.16-0", ToolDir: "internal/harness/tools/etcd36"},
	{Minor: "3.7", ModuleVersion: "v3.7.3", Image: "registry.k8s.io/etcd:3.7.3-0", ToolDir: "internal/harness/tools/etcd37"},
}

// BuildTimeout bounds one go build of etcd (about a minute with a warm
// module cache on 2 cores, several from cold).
const BuildTimeout = 15 * time.Minute

// Lookup finds the Build for version, which may be a minor ("3.5"), a
// module version ("v3.5.35", "3.5.35") or an image reference of Builds.
func Lookup(version string) (Build, error) {
	v := strings.TrimPrefix(version, "v")
	for _, b := range Builds {
		if v == b.Minor || v == strings.TrimPrefix(b.ModuleVersion, "v") || version == b.Image {
			return b, nil
		}
	}
	known := make([]string, len(Builds))
	for i, b := range Builds {
		known[i] = b.Minor + " (" + b.ModuleVersion + ", " + b.Image + ")"
	}
	return Build{}, fmt.Errorf("etcd %q: no such build (known: %s)", version, strings.Join(known, "; "))
}

// Tool is the build of b's etcd: <cache>/etcd-<module version>/etcd.
func (b Build) Tool() (build.Tool, error) {
	cache, err := build.CacheDir()
	if err != nil {
		return build.Tool{}, err
	}
	root, err := build.RepoRoot()
	if err != nil {
		return build.Tool{}, err
	}
	return build.Tool{
		Name:      "etcd " + b.ModuleVersion,
		Dir:       filepath.Join(cache, "etcd-"+b.ModuleVersion),
		ModuleDir: filepath.Join(root, b.ToolDir),
		Packages:  []string{"."},
		Binaries:  []string{"etcd"},
		Version:   "etcd Version: " + strings.TrimPrefix(b.ModuleVersion, "v"),
		Timeout:   BuildTimeout,
	}, nil
}

// Binary returns the path of the etcd binary for version (see Lookup),
// building it first if the cache does not hold it. The returned file is
// complete and executable. On error nothing is left at the returned path.
func Binary(version string) (string, error) {
	b, err := Lookup(version)
	if err != nil {
		return "", err
	}
	t, err := b.Tool()
	if err != nil {
		return "", err
	}
	if _, err := t.Build(context.Background()); err != nil {
		return "", err
	}
	return t.Paths()["etcd"], nil
}
