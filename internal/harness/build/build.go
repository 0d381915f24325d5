// Package build finds this repository and builds its programs for the
// tests, the benchmarks and the demo: stratum-upgrade itself (with or
// without the fault points armed), once per process, and the cache and lock
// helpers the tool-module builds (etcd, kubelet) share.
package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/gofrs/flock"
)

// FaultTag is the build tag that compiles the fault points in (package
// fault); FaultEnv is the variable that arms them in such a binary.
const (
	FaultTag = "stratumfault"
	FaultEnv = "STRATUM_FAULT"
)

// RepoRoot is the repository this package was compiled from ($STRATUM_SRC
// when set, else found from this source file or the working directory): the
// tool modules are built from source, so the source must be present.
func RepoRoot() (string, error) {
	if d := os.Getenv("STRATUM_SRC"); d != "" {
		return d, nil
	}
	isRoot := func(d string) bool {
		_, err := os.Stat(filepath.Join(d, "cmd", "stratum-upgrade", "main.go"))
		return err == nil
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		if root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", "..")); isRoot(root) {
			return root, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("locate the repository: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isRoot(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no cmd/stratum-upgrade above %s: run from the repository or set STRATUM_SRC", wd)
		}
	}
}

// CacheDir is $STRATUM_CACHE, or $HOME/.cache/stratum-upgrade: where built
// tools (etcd, kubelet, images) are kept between runs.
func CacheDir() (string, error) {
	if d := os.Getenv("STRATUM_CACHE"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("build cache: set STRATUM_CACHE: %w", err)
	}
	return filepath.Join(home, ".cache", "stratum-upgrade"), nil
}

// Executable reports whether path is a regular file with an execute bit.
// An absent path is false with no error.
func Executable(path string) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("build cache: %w", err)
	}
	return fi.Mode().IsRegular() && fi.Mode()&0o111 != 0, nil
}

// Lock takes an exclusive flock on path (created if absent), waiting at
// most timeout: one build of a tool at a time across processes. The
// returned func releases it.
func Lock(path string, timeout time.Duration) (func(), error) {
	l := flock.New(path)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ok, err := l.TryLockContext(ctx, 200*time.Millisecond)
	if !ok {
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("lock %s: another build held it for over %s", path, timeout)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { _ = l.Unlock() }, nil
}

var (
	binMu    sync.Mutex
	binPaths = map[bool]string{}
)

// StratumUpgrade builds cmd/stratum-upgrade once per process and returns
// its path; faults builds it with FaultTag, so FaultEnv arms the fault
// points. The binary lives in a temporary directory for the process's life.
func StratumUpgrade(faults bool) (string, error) {
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binPaths[faults]; ok {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "stratum-upgrade-bin")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "stratum-upgrade")
	args := []string{"build", "-o", p}
	if faults {
		args = append(args, "-tags", FaultTag)
	}
	cmd := exec.Command("go", append(args, "./cmd/stratum-upgrade")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %v: %v\n%s", args, err, out)
	}
	binPaths[faults] = p
	return p, nil
}
