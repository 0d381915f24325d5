package kubeadmgen

import (
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestConfigFiles: every configuration has its file, which names the
// version asked for and the configuration's node, and parses as the two
// kubeadm documents; and every file is a configuration.
func TestConfigFiles(t *testing.T) {
	for _, c := range Configs {
		b, err := c.File("v1.99.9")
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		var kinds []string
		for {
			var doc struct {
				APIVersion        string `yaml:"apiVersion"`
				Kind              string `yaml:"kind"`
				KubernetesVersion string `yaml:"kubernetesVersion"`
				NodeRegistration  struct {
					Name string `yaml:"name"`
				} `yaml:"nodeRegistration"`
			}
			if err := dec.Decode(&doc); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			kinds = append(kinds, doc.Kind)
			switch doc.Kind {
			case "InitConfiguration":
				if doc.NodeRegistration.Name != c.NodeName {
					t.Errorf("%s: nodeRegistration.name %q, Config.NodeName %q", c.Name, doc.NodeRegistration.Name, c.NodeName)
				}
			case "ClusterConfiguration":
				if doc.KubernetesVersion != "v1.99.9" {
					t.Errorf("%s: kubernetesVersion %q, want the version asked for", c.Name, doc.KubernetesVersion)
				}
			}
			if doc.APIVersion != "kubeadm.k8s.io/v1beta4" {
				t.Errorf("%s: apiVersion %q", c.Name, doc.APIVersion)
			}
		}
		if !slices.Equal(kinds, []string{"InitConfiguration", "ClusterConfiguration"}) {
			t.Errorf("%s: documents %v", c.Name, kinds)
		}
		if len(c.HostDirs) == 0 {
			t.Errorf("%s: no HostDirs", c.Name)
		}
	}
	// kubeadm reads a patches directory from the node: the configuration
	// brings its patches (RootFiles), and the others bring nothing there.
	for _, c := range Configs {
		files, err := c.RootFiles()
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.File("v1.99.9")
		if err != nil {
			t.Fatal(err)
		}
		dir, hasPatches := patchesDir(t, b)
		n := 0
		for p := range files {
			if !strings.HasPrefix(p, "/") {
				t.Errorf("%s: root file %q: want an absolute path", c.Name, p)
			}
			if hasPatches && strings.HasPrefix(p, dir+"/") {
				n++
			}
		}
		if hasPatches && n == 0 {
			t.Errorf("%s: patches directory %s, but no patch among its root files %v", c.Name, dir, slices.Collect(maps.Keys(files)))
		}
	}
	if pc, err := Lookup("patches"); err != nil {
		t.Fatal(err)
	} else if rf, err := pc.RootFiles(); err != nil || len(rf["/etc/kubernetes/patches/kube-scheduler+merge.yaml"]) == 0 {
		t.Errorf("patches: RootFiles %v, %v: want kube-scheduler+merge.yaml in /etc/kubernetes/patches", slices.Collect(maps.Keys(rf)), err)
	}
	if rf, err := Configs[0].RootFiles(); err != nil || len(rf) != 0 {
		t.Errorf("defaults: RootFiles %v, %v: want none", rf, err)
	}
	files, err := filepath.Glob("configs/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if _, err := Lookup(name); err != nil {
			t.Errorf("configs/%s.yaml is no configuration: %v", name, err)
		}
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "known: defaults") {
		t.Errorf("Lookup(nope) = %v, want an error listing the configurations", err)
	}
}

// patchesDir is the patches directory an InitConfiguration of the file
// names, if any.
func patchesDir(t *testing.T, file []byte) (string, bool) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(file))
	for {
		var doc struct {
			Kind    string `yaml:"kind"`
			Patches struct {
				Directory string `yaml:"directory"`
			} `yaml:"patches"`
		}
		if err := dec.Decode(&doc); err == io.EOF {
			return "", false
		} else if err != nil {
			t.Fatal(err)
		}
		if doc.Kind == "InitConfiguration" && doc.Patches.Directory != "" {
			return doc.Patches.Directory, true
		}
	}
}

func TestDiffFixtures(t *testing.T) {
	write := func(dir string, files map[string]string) {
		for name, body := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, got := t.TempDir(), t.TempDir()
	write(want, map[string]string{"kubeadm.yaml": "a", "manifests/etcd.yaml": "e", "manifests/kube-scheduler.yaml": "s"})
	write(got, map[string]string{"kubeadm.yaml": "a", "manifests/etcd.yaml": "E", "kubelet-uids.json": "{}"})
	diffs, err := DiffFixtures(want, got)
	if err != nil {
		t.Fatal(err)
	}
	wantDiffs := []FileDiff{{"kubelet-uids.json", "extra"}, {"manifests/etcd.yaml", "differs"}, {"manifests/kube-scheduler.yaml", "missing"}}
	if !slices.Equal(diffs, wantDiffs) {
		t.Errorf("DiffFixtures = %q, want %q", diffs, wantDiffs)
	}
	if diffs, err := DiffFixtures(want, want); err != nil || diffs != nil {
		t.Errorf("DiffFixtures of a fixture with itself = %q, %v", diffs, err)
	}
	if _, err := DiffFixtures(want, filepath.Join(got, "absent")); err == nil {
		t.Error("DiffFixtures with a missing directory: no error")
	}
}
