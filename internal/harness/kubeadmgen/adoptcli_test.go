package kubeadmgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

// adoption is what `stratum-upgrade init --from-kubeadm` made of one
// fixture: its exit code, its report (--output json, docs/schemas/adopt.json)
// and standard error.
type adoption struct {
	code   int
	report struct {
		Components []struct {
			Name     string   `json:"name"`
			File     string   `json:"file"`
			Restarts bool     `json:"restarts"`
			Why      []string `json:"why"`
		} `json:"components"`
		Notes []string `json:"notes"`
	}
	stderr string
}

// keptRunning is nil when init reported every one of kubeadm's four
// components "kept running" and kubeadm's configuration agreeing with its
// manifests, else what it reported instead.
func (a adoption) keptRunning() error {
	if a.code != 0 {
		return fmt.Errorf("exit %d: %s", a.code, strings.TrimSpace(a.stderr))
	}
	var problems []string
	for _, c := range a.report.Components {
		if c.Restarts {
			problems = append(problems, c.Name+" WOULD RESTART: "+strings.Join(c.Why, "; "))
		}
	}
	if len(a.report.Components) != len(Manifests) {
		problems = append(problems, fmt.Sprintf("%d components reported, want %d", len(a.report.Components), len(Manifests)))
	}
	for _, n := range a.report.Notes {
		problems = append(problems, "note: "+n)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// adoptFixture copies the fixture's manifests into a fresh manifest
// directory and runs `init --from-kubeadm --kubeadm-config` on it with the
// program bin (with --yes when yes), a state directory beside it and no
// component processes in view. It returns what init reported and the
// manifest directory.
func adoptFixture(t *testing.T, bin, fixture string, yes bool) (adoption, string) {
	t.Helper()
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.CopyFS(manifests, os.DirFS(filepath.Join(fixture, ManifestsDir))); err != nil {
		t.Fatal(err)
	}
	args := []string{"--manifest-dir", manifests, "--state-dir", filepath.Join(dir, "state"), "--proc-scope", "self",
		"init", "--from-kubeadm", "--kubeadm-config", filepath.Join(fixture, ConfigFile)}
	if yes {
		args = append(args, "--yes")
	} else {
		args = append(args, "--output", "json")
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var a adoption
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		a.code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	a.stderr = stderr.String()
	if !yes && a.code == 0 {
		if err := json.Unmarshal(stdout.Bytes(), &a.report); err != nil {
			t.Fatalf("init --from-kubeadm --output json: %v\n%s", err, stdout.Bytes())
		}
	}
	return a, manifests
}

// TestAdoptFixtures is issue 28's "adoption of every manifest the real
// kubeadm writes, with zero restarts", on every committed fixture (every
// supported minor, every configuration): `init --from-kubeadm` reports
// every component kept running. The configurations of NeedsModel are
// expected to fail until the node state can say what they configure, and
// fail this test once they no longer do, so that their entry goes.
func TestAdoptFixtures(t *testing.T) {
	bin, err := build.StratumUpgrade(false)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range kubebuild.KubeadmVersions() {
		for _, c := range Configs {
			t.Run(v+"/"+c.Name, func(t *testing.T) {
				fixture, err := FixtureDir(v, c.Name)
				if err != nil {
					t.Fatal(err)
				}
				a, _ := adoptFixture(t, bin, fixture, false)
				got := a.keptRunning()
				why, needsModel := NeedsModel[c.Name]
				switch {
				case needsModel && got == nil:
					t.Errorf("every component kept running: remove %q from NeedsModel (%s)", c.Name, why)
				case needsModel:
					t.Logf("expected failure (NeedsModel: %s):\n%v", why, got)
				case got != nil:
					t.Errorf("init --from-kubeadm does not keep every component running:\n%v", got)
				}
			})
		}
	}
}

// TestRealAdoptKeepsKubeletUIDs checks adoption on the real kubelet code
// of each minor (kubeletuid), for every fixture: kubeadm's own manifests
// are, at /etc/kubernetes/manifests on the configuration's node, the pods
// UIDsFile pins; and after `init --from-kubeadm --yes` rewrote them as
// stratum renders them, each file is still that pod, with that UID. Same
// UID, same pod: kubelet leaves the running container alone. The
// manifests are at their own paths, unlike on the test bed
// (cmd/stratum-upgrade TestAdoptKubeadmOnTestBed), which moves them. A
// configuration of NeedsModel is only checked against UIDsFile.
func TestRealAdoptKeepsKubeletUIDs(t *testing.T) {
	for _, v := range kubebuild.KubeadmVersions() {
		for _, c := range Configs {
			t.Run(v+"/"+c.Name, func(t *testing.T) {
				needKubeadm(t, v)
				bin, err := build.StratumUpgrade(false)
				if err != nil {
					t.Fatal(err)
				}
				fixture, err := FixtureDir(v, c.Name)
				if err != nil {
					t.Fatal(err)
				}
				pinned := pinnedUIDs(t, fixture)
				kubeadms, _, err := KubeletUIDs(t.Context(), v, filepath.Join(fixture, ManifestsDir), c.NodeName)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range Manifests {
					if kubeadms[f] != pinned[f] {
						t.Errorf("%s: kubeadm's manifest is pod %+v to kubelet %s, %s pins %+v", f, kubeadms[f], v, UIDsFile, pinned[f])
					}
				}
				if why, ok := NeedsModel[c.Name]; ok {
					t.Skipf("expected failure (NeedsModel: %s): init --from-kubeadm --yes would refuse", why)
				}
				a, manifests := adoptFixture(t, bin, fixture, true)
				if a.code != 0 {
					t.Fatalf("init --from-kubeadm --yes: exit %d\n%s", a.code, a.stderr)
				}
				adopted, _, err := KubeletUIDs(t.Context(), v, manifests, c.NodeName)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range Manifests {
					if adopted[f] != pinned[f] {
						t.Errorf("%s: adopted, it is pod %+v to kubelet %s, kubeadm's was %+v: kubelet would restart it", f, adopted[f], v, pinned[f])
					}
				}
			})
		}
	}
}
