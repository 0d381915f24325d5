package main

// The files every artifact ships beside the binary, generated from the
// command tree (man pages, completions) or taken from deploy/.

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra/doc"

	"github.com/ciq/stratum-upgrade/internal/cli"
)

// The layout of share/ (and of a tarball, whose files sit at the same
// relative paths). systemd/ holds the units as deploy/systemd has them
// (the binary in /usr/local/bin, where the tarball's README puts it);
// systemd-pkg/ the same units for the packages, which install the binary
// as /usr/bin/stratum-upgrade.
const (
	manDir      = "man/man1"
	unitsDir    = "systemd"
	pkgUnitsDir = "systemd-pkg"
	bashFile    = "completions/stratum-upgrade.bash"
	zshFile     = "completions/_stratum-upgrade"
	fishFile    = "completions/stratum-upgrade.fish"
	configFile  = "upgrade.yaml"
)

// Installed paths, the packages' and the tarball's.
const (
	tarballBin = "/usr/local/bin/stratum-upgrade"
	packageBin = "/usr/bin/stratum-upgrade"
)

// writeShared writes share/: man pages (gzipped), completion scripts,
// units and the example config.
func writeShared(share string) error {
	root := cli.Root(io.Discard, io.Discard)
	root.DisableAutoGenTag = true // no date: the same tree gives the same pages
	man := filepath.Join(share, manDir)
	if err := os.MkdirAll(man, 0o755); err != nil {
		return err
	}
	if err := doc.GenManTree(root, &doc.GenManHeader{Title: "STRATUM-UPGRADE", Section: "1", Source: "stratum-upgrade", Manual: "stratum-upgrade manual"}, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	if err := gzipAll(man); err != nil {
		return err
	}
	for file, gen := range map[string]func(io.Writer) error{
		bashFile: func(w io.Writer) error { return root.GenBashCompletionV2(w, true) },
		zshFile:  root.GenZshCompletion,
		fishFile: func(w io.Writer) error { return root.GenFishCompletion(w, true) },
	} {
		var b bytes.Buffer
		if err := gen(&b); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := writeFile(filepath.Join(share, file), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	units, err := filepath.Glob("deploy/systemd/*.service")
	if err != nil || len(units) == 0 {
		return fmt.Errorf("no units in deploy/systemd (run from the repository root): %v", err)
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			return err
		}
		if !bytes.Contains(b, []byte(tarballBin)) {
			return fmt.Errorf("%s: does not run %s", u, tarballBin)
		}
		if err := writeFile(filepath.Join(share, unitsDir, filepath.Base(u)), b, 0o644); err != nil {
			return err
		}
		pkg := bytes.ReplaceAll(b, []byte(tarballBin), []byte(packageBin))
		if err := writeFile(filepath.Join(share, pkgUnitsDir, filepath.Base(u)), pkg, 0o644); err != nil {
			return err
		}
	}
	b, err := os.ReadFile("deploy/packaging/upgrade.yaml")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(share, configFile), b, 0o644)
}

// gzipAll replaces every file of dir by its gzip (no name, no time in the
// header: the same page gives the same bytes).
func gzipAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var z bytes.Buffer
		w, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		if _, err := w.Write(b); err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		if err := writeFile(p+".gz", z.Bytes(), 0o644); err != nil {
			return err
		}
		if err := os.Remove(p); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, mode)
}

// sharedFiles lists share/'s files, relative, sorted.
func sharedFiles(share string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(share, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(share, p)
		if err == nil && !strings.HasPrefix(rel, pkgUnitsDir+"/") {
			files = append(files, rel)
		}
		return err
	})
	return files, err
}
