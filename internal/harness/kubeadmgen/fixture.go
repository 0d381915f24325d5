package kubeadmgen

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// FixtureRoot is where the fixtures are checked in, relative to the
// repository root: FixtureRoot/<version>/<configuration>/.
const FixtureRoot = "testdata/kubeadm"

// The files of a fixture.
const (
	// ConfigFile is the kubeadm configuration file kubeadm read.
	ConfigFile = "kubeadm.yaml"
	// HostDirsFile lists Config.HostDirs, one a line: the directories
	// kubeadm's root file system held.
	HostDirsFile = "host-dirs.txt"
	// ManifestsDir holds the manifests exactly as kubeadm wrote them.
	ManifestsDir = "manifests"
	// RootFilesDir holds Config.RootFiles at their paths (the patches
	// kubeadm applied, the files the extra volumes mount); absent when
	// there are none.
	RootFilesDir = "files"
	// UIDsFile is kubeletuid's JSON for ManifestsDir at ManifestDir on
	// the configuration's node: {"<file>": {"name": ..., "uid": ...}}.
	UIDsFile = "kubelet-uids.json"
)

// FixtureDir is the checked-in fixture of configuration name for
// version, absolute.
func FixtureDir(version, name string) (string, error) {
	root, err := build.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, FixtureRoot, version, name), nil
}

// WriteFixture writes configuration name's fixture for version into dir,
// which must not exist yet: ConfigFile, HostDirsFile, RootFilesDir,
// ManifestsDir from Generate and UIDsFile from KubeletUIDs. Root only, as they are.
func WriteFixture(ctx context.Context, version, name, dir string) error {
	c, err := Lookup(name)
	if err != nil {
		return err
	}
	file, err := c.File(version)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), file, 0o644); err != nil {
		return err
	}
	hostDirs := "# The directories of kubeadm's root file system (kubeadmgen.Config.HostDirs).\n" + strings.Join(c.HostDirs, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, HostDirsFile), []byte(hostDirs), 0o644); err != nil {
		return err
	}
	if files, err := c.RootFiles(); err != nil {
		return err
	} else if len(files) > 0 {
		if err := writeRootFiles(c, filepath.Join(dir, RootFilesDir)); err != nil {
			return err
		}
	}
	manifests := filepath.Join(dir, ManifestsDir)
	if err := Generate(ctx, version, name, manifests); err != nil {
		return err
	}
	_, out, err := KubeletUIDs(ctx, version, manifests, c.NodeName)
	if err != nil {
		return fmt.Errorf("kubeadm %s, configuration %s: %w", version, name, err)
	}
	return os.WriteFile(filepath.Join(dir, UIDsFile), out, 0o644)
}

// FileDiff is one file in which two fixtures differ.
type FileDiff struct {
	// File is the file's slash path in the fixture.
	File string
	// What is "missing" (from got), "extra" (in got) or "differs".
	What string
}

func (d FileDiff) String() string { return d.File + ": " + d.What }

// DiffFixtures lists each file that differs between the fixture
// directories want and got, by file: missing from got, extra in got, or
// with other bytes; nil when they are the same. Only file contents count,
// not modes.
func DiffFixtures(want, got string) ([]FileDiff, error) {
	w, err := files(want)
	if err != nil {
		return nil, err
	}
	g, err := files(got)
	if err != nil {
		return nil, err
	}
	var diffs []FileDiff
	for name, b := range w {
		gb, ok := g[name]
		switch {
		case !ok:
			diffs = append(diffs, FileDiff{name, "missing"})
		case !bytes.Equal(b, gb):
			diffs = append(diffs, FileDiff{name, "differs"})
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			diffs = append(diffs, FileDiff{name, "extra"})
		}
	}
	slices.SortFunc(diffs, func(a, b FileDiff) int { return strings.Compare(a.File, b.File) })
	return diffs, nil
}

// files are the regular files under dir, by slash path relative to dir.
func files(dir string) (map[string][]byte, error) {
	m := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read fixture: %w", err)
	}
	return m, nil
}
