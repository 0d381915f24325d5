package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageVersion: a release tag is the package version; anything else
// git describe prints sorts below every release in dpkg and rpm, and holds
// no '-' (rpm refuses it).
func TestPackageVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":          "1.2.3",
		"6e25152":         "0.0.0~git6e25152",
		"6e25152-dirty":   "0.0.0~git6e25152.dirty",
		"v1.2.3-4-gabcde": "0.0.0~gitv1.2.3.4.gabcde",
	} {
		if got := packageVersion(in); got != want {
			t.Errorf("packageVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestShared: the files every artifact ships: a man page per command
// (gzipped), the three completion scripts, the units (the packages' run
// /usr/bin/stratum-upgrade, the tarball's /usr/local/bin) and the example
// config; and the packages' nfpm configuration installs each where the
// distribution looks, the config as a conffile.
func TestShared(t *testing.T) {
	t.Chdir("../../../..") // the repository root, as make dist runs it
	share := t.TempDir()
	if err := writeShared(share); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"man/man1/stratum-upgrade.1.gz", "man/man1/stratum-upgrade-run.1.gz", bashFile, zshFile, fishFile, configFile,
		"systemd/stratum-upgrade-resume.service", "systemd-pkg/stratum-upgrade-prepare.service"} {
		if _, err := os.Stat(filepath.Join(share, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	pkg, err := os.ReadFile(filepath.Join(share, "systemd-pkg/stratum-upgrade-resume.service"))
	if err != nil || !strings.Contains(string(pkg), "ExecStart="+packageBin+" ") || strings.Contains(string(pkg), tarballBin) {
		t.Errorf("the packages' resume unit runs the wrong binary (%v):\n%s", err, pkg)
	}
	cfg, err := nfpmConfig("/repo", "v1.2.3", "arm64", "/bin/su", share)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"arch: arm64", `version: "1.2.3"`, "dst: /usr/bin/stratum-upgrade", "dst: /usr/lib/systemd/system/stratum-upgrade-resume.service",
		"dst: /usr/share/man/man1/stratum-upgrade-run.1.gz", "dst: /usr/share/bash-completion/completions/stratum-upgrade",
		"dst: /etc/stratum/upgrade.yaml\n    file_info: {mode: 0644}\n    type: config|noreplace", "postinstall: /repo/deploy/packaging/postinstall.sh"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("nfpm config has no %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "dst: /var/lib/stratum") {
		t.Error("the package owns something under /var/lib/stratum, which removal must leave")
	}
}
