package main

// The artifacts of one architecture: the tarball and the .deb and .rpm
// (nfpm), and SHA256SUMS over every artifact.

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// tarball writes stratum-upgrade_<version>_linux_<arch>.tar.gz: one
// directory of that name with the binary and share/'s files.
func tarball(out, version, arch, bin, share string) (string, error) {
	name := fmt.Sprintf("stratum-upgrade_%s_linux_%s", version, arch)
	path := filepath.Join(out, name+".tar.gz")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	z := gzip.NewWriter(f)
	tw := tar.NewWriter(z)
	files, err := sharedFiles(share)
	if err != nil {
		return "", err
	}
	add := func(src, rel string, mode int64) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + rel, Mode: mode, Size: int64(len(b)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}
	if err := add(bin, "stratum-upgrade", 0o755); err != nil {
		return "", err
	}
	if err := add("README.md", "README.md", 0o644); err != nil {
		return "", err
	}
	for _, rel := range files {
		if err := add(filepath.Join(share, rel), rel, 0o644); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := z.Close(); err != nil {
		return "", err
	}
	return path, f.Close()
}

// packageVersion is version as the .deb and .rpm take it: a release tag
// v1.2.3 is 1.2.3; anything else git describe prints (a commit, a commit
// with -dirty, a tag with commits after it) sorts below every release,
// 0.0.0~git<it>, with '.' for '-' (rpm takes no '-' in a version).
func packageVersion(version string) string {
	v := strings.TrimPrefix(version, "v")
	if regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(v) {
		return v
	}
	return "0.0.0~git" + strings.NewReplacer("-", ".", "_", ".", "+", ".").Replace(version)
}

// nfpmConfig is the nfpm configuration of one architecture.
// Every path in it is absolute: nfpm runs in its tool module's directory.
func nfpmConfig(repo, version, arch, bin, share string) (string, error) {
	files, err := sharedFiles(share)
	if err != nil {
		return "", err
	}
	var c strings.Builder
	fmt.Fprintf(&c, `name: stratum-upgrade
arch: %s
platform: linux
version: %q
version_schema: none
section: admin
priority: optional
maintainer: CIQ <stratum@ciq.com>
homepage: https://github.com/ciq/stratum-upgrade
description: |-
  Own a Kubernetes control-plane node's static pod manifests and upgrade
  them as journaled transactions with rollback. Installs the boot units
  (enabled), man pages, shell completions and an example
  /etc/stratum/upgrade.yaml; /var/lib/stratum stays on removal.
scripts:
  postinstall: %[5]s/deploy/packaging/postinstall.sh
  preremove: %[5]s/deploy/packaging/preremove.sh
  postremove: %[5]s/deploy/packaging/postremove.sh
contents:
  - src: %[3]s
    dst: %[4]s
    file_info: {mode: 0755}
`, arch, packageVersion(version), bin, packageBin, repo)
	entry := func(src, dst, extra string) {
		fmt.Fprintf(&c, "  - src: %s\n    dst: %s\n    file_info: {mode: 0644}\n%s", filepath.Join(share, src), dst, extra)
	}
	units, _ := filepath.Glob(filepath.Join(share, pkgUnitsDir, "*.service"))
	for _, u := range units {
		rel, _ := filepath.Rel(share, u)
		entry(rel, "/usr/lib/systemd/system/"+filepath.Base(u), "")
	}
	for _, rel := range files {
		switch {
		case strings.HasPrefix(rel, manDir+"/"):
			entry(rel, "/usr/share/man/man1/"+filepath.Base(rel), "")
		case rel == bashFile:
			entry(rel, "/usr/share/bash-completion/completions/stratum-upgrade", "")
		case rel == zshFile: // Debian's zsh reads vendor-completions, Fedora's site-functions
			entry(rel, "/usr/share/zsh/vendor-completions/_stratum-upgrade", "    packager: deb\n")
			entry(rel, "/usr/share/zsh/site-functions/_stratum-upgrade", "    packager: rpm\n")
		case rel == fishFile:
			entry(rel, "/usr/share/fish/vendor_completions.d/stratum-upgrade.fish", "")
		case rel == configFile:
			entry(rel, "/etc/stratum/upgrade.yaml", "    type: config|noreplace\n")
		}
	}
	return c.String(), nil
}

// packages builds the .deb and the .rpm of arch with nfpm, run from its
// tool module (built by go the first time, about 45 s, then cached).
func packages(ctx context.Context, out, work, version, arch, bin, share string) ([]string, error) {
	repo, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	cfg, err := nfpmConfig(repo, version, arch, bin, share)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(work, arch, "nfpm.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	var made []string
	for _, packager := range []string{"deb", "rpm"} {
		dir := filepath.Join(work, arch, packager)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, "go", "tool", "nfpm", "package", "--config", cfgPath, "--packager", packager, "--target", dir+"/")
		cmd.Dir = filepath.Join(repo, "internal/harness/tools/nfpm")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("nfpm %s for %s: %w", packager, arch, err)
		}
		built, err := filepath.Glob(filepath.Join(dir, "*."+packager))
		if err != nil || len(built) != 1 {
			return nil, fmt.Errorf("nfpm %s for %s: want one package in %s, found %v", packager, arch, dir, built)
		}
		dst := filepath.Join(out, filepath.Base(built[0]))
		if err := os.Rename(built[0], dst); err != nil {
			return nil, err
		}
		made = append(made, dst)
	}
	return made, nil
}

// checksums writes out/SHA256SUMS in sha256sum's format.
func checksums(out string, artifacts []string) error {
	var b strings.Builder
	for _, a := range artifacts {
		f, err := os.Open(a)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), filepath.Base(a))
	}
	return os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(b.String()), 0o644)
}
