// Command dist is make dist: for linux/amd64 and linux/arm64, a tarball
// with the binary, the systemd units, the man pages, the shell completions
// and the example config, a .deb and an .rpm (nfpm, the tool module under
// internal/harness/tools/nfpm) that install the same, and SHA256SUMS over
// all of them. Run from the repository root:
//
//	go run ./internal/harness/cmd/dist -version v1.2.3 -out dist
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// arches are the platforms make dist builds for.
var arches = []string{"amd64", "arm64"}

func main() {
	version := flag.String("version", "", "the version, as git describe prints it (make dist passes it); set into the binary with -ldflags")
	out := flag.String("out", "dist", "output directory (emptied first)")
	only := flag.String("arch", "", "build this architecture only (default: "+strings.Join(arches, ", ")+")")
	flag.Parse()
	if *version == "" {
		fmt.Fprintln(os.Stderr, "dist: -version is required")
		os.Exit(2)
	}
	list := arches
	if *only != "" {
		list = []string{*only}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := dist(ctx, *version, *out, list); err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

// dist builds every artifact into out and lists them.
func dist(ctx context.Context, version, out string, list []string) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	work := filepath.Join(out, "work")
	share := filepath.Join(work, "share")
	if err := writeShared(share); err != nil {
		return fmt.Errorf("man pages, completions, units: %w", err)
	}
	var artifacts []string
	for _, arch := range list {
		start := time.Now()
		bin := filepath.Join(work, arch, "stratum-upgrade")
		if err := buildBinary(ctx, version, arch, bin); err != nil {
			return err
		}
		tgz, err := tarball(out, version, arch, bin, share)
		if err != nil {
			return fmt.Errorf("tarball %s: %w", arch, err)
		}
		pkgs, err := packages(ctx, out, work, version, arch, bin, share)
		if err != nil {
			return err
		}
		artifacts = append(artifacts, tgz)
		artifacts = append(artifacts, pkgs...)
		slog.Info("built", "arch", arch, "elapsed", time.Since(start).Round(time.Second))
	}
	if err := checksums(out, artifacts); err != nil {
		return err
	}
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	for _, a := range append(artifacts, "SHA256SUMS") {
		fmt.Println(filepath.Join(out, filepath.Base(a)))
	}
	return nil
}

// buildBinary builds stratum-upgrade for linux/arch, static and
// reproducible (-trimpath, no cgo), with version set by -ldflags and the
// commit stamped (-buildvcs=true: GOFLAGS may turn it off) for version.
func buildBinary(ctx context.Context, version, arch, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=true",
		"-ldflags", "-s -w -X github.com/ciq/stratum-upgrade/internal/cli.Version="+version,
		"-o", bin, "./cmd/stratum-upgrade")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for linux/%s: %w", arch, err)
	}
	return nil
}
