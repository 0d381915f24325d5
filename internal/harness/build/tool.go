package build

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Tool is a build of one or more programs of a nested tool module into the
// cache: etcd (internal/harness/etcdbuild), the Kubernetes control-plane
// binaries (internal/harness/kubebuild).
type Tool struct {
	// Name names the build in messages ("etcd v3.6.16").
	Name string
	// Dir is where the binaries live: <CacheDir>/<something versioned>.
	Dir string
	// ModuleDir is the tool module's directory, absolute.
	ModuleDir string
	// Packages are the main packages to build, in one go build so that
	// the packages they share compile once; Binaries names the binary of
	// each, in the same order. With one package the binary may have any
	// name; with several each must be the last element of its package
	// path (go build -o DIR/ names them so).
	Packages []string
	Binaries []string
	// LDFlags is passed as -ldflags when set.
	LDFlags string
	// Version is what `<binary> --version` must print, for each binary
	// (it must contain it).
	Version string
	// VersionArgs replace --version for the binaries they name: kubeadm
	// prints its version for `version -o short`, and refuses --version.
	VersionArgs map[string][]string
	// Timeout bounds the go build.
	Timeout time.Duration
}

// Paths are the binaries' paths, by name.
func (t Tool) Paths() map[string]string {
	m := make(map[string]string, len(t.Binaries))
	for _, b := range t.Binaries {
		m[b] = filepath.Join(t.Dir, b)
	}
	return m
}

// Built reports whether every binary is in the cache; it never builds.
func (t Tool) Built() (bool, error) {
	for _, b := range t.Binaries {
		if ok, err := Executable(filepath.Join(t.Dir, b)); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// Build makes every binary present in Dir, building them if any is
// missing: one go build -trimpath (GOWORK=off, CGO_ENABLED=0,
// -mod=readonly) in ModuleDir into a temporary directory under Dir, each
// binary's --version checked, then each renamed into place. It holds an
// exclusive lock on Dir/build.lock meanwhile, so concurrent callers build
// once and nobody runs a partial binary: a file at a binary's path is
// always whole and checked. built reports whether this call built.
func (t Tool) Build(ctx context.Context) (built bool, err error) {
	if ok, err := t.Built(); err != nil || ok {
		return false, err
	}
	if len(t.Packages) == 0 || len(t.Packages) != len(t.Binaries) {
		return false, fmt.Errorf("build %s: %d packages for %d binaries", t.Name, len(t.Packages), len(t.Binaries))
	}
	if len(t.Packages) > 1 {
		for i, p := range t.Packages {
			if path.Base(p) != t.Binaries[i] {
				return false, fmt.Errorf("build %s: go build -o DIR/ names %s's binary %s, not %s", t.Name, p, path.Base(p), t.Binaries[i])
			}
		}
	}
	if err := os.MkdirAll(t.Dir, 0o755); err != nil {
		return false, fmt.Errorf("build %s: cache: %w", t.Name, err)
	}
	unlock, err := Lock(filepath.Join(t.Dir, "build.lock"), t.Timeout)
	if err != nil {
		return false, err
	}
	defer unlock()
	if ok, err := t.Built(); err != nil || ok { // built while we waited
		return false, err
	}
	tmp, err := os.MkdirTemp(t.Dir, ".build-")
	if err != nil {
		return false, fmt.Errorf("build %s: cache: %w", t.Name, err)
	}
	defer os.RemoveAll(tmp)
	out := tmp + string(filepath.Separator)
	if len(t.Binaries) == 1 {
		out = filepath.Join(tmp, t.Binaries[0])
	}
	args := []string{"build", "-trimpath", "-mod=readonly"}
	if t.LDFlags != "" {
		args = append(args, "-ldflags", t.LDFlags)
	}
	args = append(append(args, "-o", out), t.Packages...)
	bctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	cmd := exec.CommandContext(bctx, "go", args...)
	cmd.Dir = t.ModuleDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("build %s in %s (timeout %s): %w\n%s", t.Name, cmd.Dir, t.Timeout, err, b)
	}
	for _, b := range t.Binaries {
		p := filepath.Join(tmp, b)
		vargs := []string{"--version"}
		if a, ok := t.VersionArgs[b]; ok {
			vargs = a
		}
		v, err := exec.Command(p, vargs...).CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("built %s %s does not run (%s %s): %w\n%s", t.Name, b, b, strings.Join(vargs, " "), err, v)
		}
		if !strings.Contains(string(v), t.Version) {
			return false, fmt.Errorf("built %s %s reports %q for %s, want %q", t.Name, b, strings.TrimSpace(string(v)), strings.Join(vargs, " "), t.Version)
		}
	}
	for _, b := range t.Binaries {
		if err := os.Rename(filepath.Join(tmp, b), filepath.Join(t.Dir, b)); err != nil {
			return false, fmt.Errorf("build %s: cache: %w", t.Name, err)
		}
	}
	return true, nil
}
