package e2e

import (
	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
)

// CacheDir is where the end-to-end builds are kept between runs: the test
// bed's cache ($STRATUM_CACHE, default $HOME/.cache/stratum-upgrade).
func CacheDir() (string, error) { return build.CacheDir() }

// StaticEtcd returns a statically linked etcd for minor ("3.5" or "3.6"),
// the only kind an image of one binary can run: etcdbuild.Binary's build
// when it is static (it builds with CGO_ENABLED=0), otherwise a
// CGO_ENABLED=0 build of the same tool module cached at
// <cache>/e2e/etcd-<version>/etcd.
func StaticEtcd(minor string) (string, error) {
	path, err := etcdbuild.Binary(minor)
	if err != nil {
		return "", err
	}
	static, err := IsStatic(path)
	if err != nil {
		return "", err
	}
	if static {
		return path, nil
	}
	b, err := etcdbuild.Lookup(minor)
	if err != nil {
		return "", err
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	root, err := build.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(cache, "e2e", "etcd-"+b.ModuleVersion, "etcd")
	if err := BuildStatic(filepath.Join(root, b.ToolDir), ".", out); err != nil {
		return "", err
	}
	return out, nil
}

// IsStatic reports whether the ELF executable at path needs no dynamic
// loader (no PT_INTERP program header).
func IsStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("static check %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// BuildStatic builds package pkg of the module in dir with CGO_ENABLED=0
// into out, through a temporary name in out's directory and a rename, so
// out is always either the previous build or the new one, whole. It checks
// that the result is static.
func BuildStatic(dir, pkg, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	unlock, err := build.Lock(out+".lock", 10*time.Minute)
	if err != nil {
		return err
	}
	defer unlock()
	tmp := filepath.Join(filepath.Dir(out), fmt.Sprintf(".%s-%d.tmp", filepath.Base(out), os.Getpid()))
	defer os.Remove(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", tmp, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	static, err := IsStatic(tmp)
	if err != nil {
		return err
	}
	if !static {
		return fmt.Errorf("go build %s with CGO_ENABLED=0 produced a dynamically linked binary", pkg)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("build %s: %w", pkg, err)
	}
	return nil
}

// fileDigest is the hex sha256 of the file at path.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("digest %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// tailFile is the last n lines of the file at path ("" when unreadable).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
