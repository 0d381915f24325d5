package manifest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// mergedPlugins decodes the derived admission file of st with admission as
// the profile's admission file.
func mergedPlugins(t *testing.T, st *nodestate.NodeState, admission string) map[string]admissionPlugin {
	t.Helper()
	files, err := DerivedFiles(st, Profile{AuditPolicy: []byte("x"), AdmissionConfig: []byte(admission)})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("derived files: %d", len(files))
	}
	var ac admissionConfiguration
	if err := yaml.UnmarshalStrict(files[0].Data, &ac); err != nil {
		t.Fatalf("derived file does not decode: %v\n%s", err, files[0].Data)
	}
	if ac.APIVersion != admissionAPIVersion || ac.Kind != admissionKind {
		t.Fatalf("derived file is %s %s", ac.APIVersion, ac.Kind)
	}
	var names []string
	out := map[string]admissionPlugin{}
	for _, p := range ac.Plugins {
		names = append(names, p.Name)
		out[p.Name] = p
	}
	if !slices.IsSorted(names) {
		t.Errorf("plugins not sorted by name: %v", names)
	}
	return out
}

func configOf(t *testing.T, p admissionPlugin) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(p.Configuration, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAdmissionMerge(t *testing.T) {
	st := loadState(t, "cis")
	const head = "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\n"
	t.Run("no plugins keeps the built-ins", func(t *testing.T) {
		got := mergedPlugins(t, st, head+"plugins: []\n")
		if len(got) != 2 {
			t.Fatalf("plugins %v", got)
		}
		ps := configOf(t, got["PodSecurity"])
		if d := ps["defaults"].(map[string]any); d["enforce"] != "baseline" || d["audit"] != "restricted" || d["warn"] != "restricted" {
			t.Errorf("PodSecurity defaults %v", d)
		}
		if ns := ps["exemptions"].(map[string]any)["namespaces"]; !reflect.DeepEqual(ns, []any{"kube-system"}) {
			t.Errorf("PodSecurity exempt namespaces %v", ns)
		}
		limits := configOf(t, got["EventRateLimit"])["limits"].([]any)
		if l := limits[0].(map[string]any); len(limits) != 1 || l["type"] != "Server" || l["qps"] != float64(50) || l["burst"] != float64(100) {
			t.Errorf("EventRateLimit limits %v", limits)
		}
	})
	t.Run("replace and add", func(t *testing.T) {
		got := mergedPlugins(t, st, head+`plugins:
- name: ZetaWebhook
  path: /etc/stratum/zeta.yaml
- name: EventRateLimit
  configuration:
    apiVersion: eventratelimit.admission.k8s.io/v1alpha1
    kind: Configuration
    limits:
    - type: Namespace
      qps: 5
      burst: 10
      cacheSize: 2000
- name: AlwaysPullImages
  configuration: {kind: Anything}
`)
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range got {
				if !yield(n) {
					return
				}
			}
		})
		if want := []string{"AlwaysPullImages", "EventRateLimit", "PodSecurity", "ZetaWebhook"}; !reflect.DeepEqual(names, want) {
			t.Fatalf("plugins %v, want %v", names, want)
		}
		limits := configOf(t, got["EventRateLimit"])["limits"].([]any)
		if len(limits) != 1 || limits[0].(map[string]any)["type"] != "Namespace" {
			t.Errorf("EventRateLimit was not replaced: %v", limits)
		}
		if got["ZetaWebhook"].Path != "/etc/stratum/zeta.yaml" || got["ZetaWebhook"].Configuration != nil {
			t.Errorf("path plugin %+v", got["ZetaWebhook"])
		}
		if configOf(t, got["PodSecurity"])["kind"] != "PodSecurityConfiguration" {
			t.Error("built-in PodSecurity lost")
		}
	})
	t.Run("testdata profile", func(t *testing.T) {
		got := mergedPlugins(t, st, string(testProfile(t, st).AdmissionConfig))
		ns := configOf(t, got["PodSecurity"])["exemptions"].(map[string]any)["namespaces"]
		if !reflect.DeepEqual(ns, []any{"kube-system", "metallb-system"}) {
			t.Errorf("PodSecurity not replaced by the profile's: %v", ns)
		}
		if _, ok := got["ResourceQuota"]; !ok {
			t.Error("ResourceQuota not added")
		}
	})
	t.Run("key order and formatting do not change the bytes", func(t *testing.T) {
		a := head + "plugins:\n- name: X\n  configuration: {b: 1, a: [2, 3]}\n"
		b := "kind: AdmissionConfiguration\napiVersion: apiserver.config.k8s.io/v1\nplugins:\n  - configuration:\n      a:\n        - 2\n        - 3\n      b: 1\n    name: X\n"
		fa, err := DerivedFiles(st, Profile{AuditPolicy: []byte("x"), AdmissionConfig: []byte(a)})
		if err != nil {
			t.Fatal(err)
		}
		fb, err := DerivedFiles(st, Profile{AuditPolicy: []byte("x"), AdmissionConfig: []byte(b)})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fa[0].Data, fb[0].Data) {
			t.Errorf("equal configurations render differently:\n%s\n---\n%s", fa[0].Data, fb[0].Data)
		}
	})
}

func TestDerivedFiles(t *testing.T) {
	for _, state := range states {
		st := loadState(t, state)
		files, err := DerivedFiles(st, testProfile(t, st))
		if err != nil {
			t.Fatal(err)
		}
		allowed := DerivedPaths(st)
		if !slices.IsSorted(allowed) || len(allowed) == 0 {
			t.Errorf("%s: DerivedPaths %v", state, allowed)
		}
		if st.Profile.Name != nodestate.ProfileCIS && len(files) != 0 {
			t.Errorf("%s: default profile derives %d files", state, len(files))
		}
		var paths []string
		for _, f := range files {
			paths = append(paths, f.Path)
			if !slices.Contains(allowed, f.Path) || !IsDerivedPath(st, f.Path) {
				t.Errorf("%s: derived %s outside DerivedPaths %v", state, f.Path, allowed)
			}
			if !filepath.IsAbs(f.Path) || filepath.Dir(f.Path) != st.ConfigDir {
				t.Errorf("%s: derived path %s not in configDir %s", state, f.Path, st.ConfigDir)
			}
			if f.Mode != 0o600 {
				t.Errorf("%s: mode %v", state, f.Mode)
			}
		}
		if !slices.IsSorted(paths) {
			t.Errorf("%s: derived files not sorted: %v", state, paths)
		}
	}
	// DerivedPaths follows configDir and is a fresh slice.
	st := loadState(t, "default")
	st.ConfigDir = "/srv/stratum"
	p := DerivedPaths(st)
	if !reflect.DeepEqual(p, []string{"/srv/stratum/admission-config.yaml"}) {
		t.Errorf("DerivedPaths = %v", p)
	}
	p[0] = "x"
	if DerivedPaths(st)[0] != "/srv/stratum/admission-config.yaml" {
		t.Error("DerivedPaths aliases its result")
	}
	// The cis apiserver names the derived file it depends on.
	cis := loadState(t, "cis")
	spec, _ := SpecOf(renderPod(t, cis, testProfile(t, cis), nodestate.KubeAPIServer, ""), "")
	if !slices.Contains(spec.Argv, "--admission-control-config-file="+DerivedPaths(cis)[0]) {
		t.Errorf("apiserver argv does not name %s", DerivedPaths(cis)[0])
	}
	if _, err := DerivedFiles(cis, Profile{}); err == nil || !strings.Contains(err.Error(), "LoadProfile") {
		t.Errorf("cis DerivedFiles without profile contents: %v", err)
	}
}

// malformedAdmission are admission files LoadProfile, Render and
// DerivedFiles must refuse, with what the error must say.
var malformedAdmission = []struct{ name, doc, want string }{
	{"empty", "", "empty"},
	{"not yaml", "plugins: [\n", "not a valid AdmissionConfiguration"},
	{"wrong kind", "apiVersion: apiserver.config.k8s.io/v1\nkind: Policy\nplugins: []\n", `kind "Policy"`},
	{"wrong apiVersion", "apiVersion: apiserver.k8s.io/v1alpha1\nkind: AdmissionConfiguration\nplugins: []\n", `apiVersion "apiserver.k8s.io/v1alpha1"`},
	{"unknown field", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugin: []\n", `unknown field "plugin"`},
	{"unknown plugin field", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: A\n  config: {}\n", `unknown field "config"`},
	{"duplicate plugin", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: A\n  path: /a\n- name: A\n  path: /b\n", `plugin "A" is listed twice`},
	{"nameless plugin", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- path: /a\n", "name is required"},
	{"plugin without body", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: A\n", "needs a path or a configuration"},
}

func TestMalformedAdmissionNamesTheFile(t *testing.T) {
	for _, c := range malformedAdmission {
		t.Run(c.name, func(t *testing.T) {
			st, dir := cisStateIn(t)
			admission := filepath.Join(dir, "admission.yaml")
			if err := os.WriteFile(admission, []byte(c.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadProfile(st)
			mustMention(t, "LoadProfile", err, admission, "profile.admissionConfigFile", c.want)
			prof := Profile{AuditPolicy: []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\n"), AdmissionConfig: []byte(c.doc)}
			_, err = DerivedFiles(st, prof)
			if c.doc == "" {
				mustMention(t, "DerivedFiles", err, "LoadProfile")
			} else {
				mustMention(t, "DerivedFiles", err, admission, c.want)
			}
			_, err = Render(st, prof, nodestate.KubeAPIServer, "")
			if c.doc != "" {
				mustMention(t, "Render", err, admission, c.want)
			} else {
				mustMention(t, "Render", err, "LoadProfile")
			}
		})
	}
}

func mustMention(t *testing.T, what string, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded", what)
		return
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s error %q does not mention %q", what, err, w)
		}
	}
}

// cisStateIn is the cis testdata state with its profile files copied into a
// temp dir and the state pointing at them.
func cisStateIn(t *testing.T) (*nodestate.NodeState, string) {
	t.Helper()
	st := loadState(t, "cis")
	dir := t.TempDir()
	for _, f := range []struct {
		src string
		dst *string
	}{
		{"audit-policy.yaml", &st.Profile.AuditPolicyFile},
		{"admission.yaml", &st.Profile.AdmissionConfigFile},
	} {
		*f.dst = filepath.Join(dir, f.src)
		if err := os.WriteFile(*f.dst, readFile(t, filepath.Join(repoTestdata, "profiles", f.src)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	return st, dir
}

func TestLoadProfile(t *testing.T) {
	t.Run("default reads nothing", func(t *testing.T) {
		p, err := LoadProfile(loadState(t, "default"))
		if err != nil || p.AuditPolicy != nil || p.AdmissionConfig != nil {
			t.Fatalf("LoadProfile(default) = %+v, %v", p, err)
		}
	})
	t.Run("cis reads both files", func(t *testing.T) {
		st, _ := cisStateIn(t)
		p, err := LoadProfile(st)
		if err != nil {
			t.Fatal(err)
		}
		want := testProfile(t, st)
		if !bytes.Equal(p.AuditPolicy, want.AuditPolicy) || !bytes.Equal(p.AdmissionConfig, want.AdmissionConfig) {
			t.Error("LoadProfile contents differ from the files")
		}
		// Loaded from a different place, the render is the golden one but
		// for the file paths in argv and mounts.
		if a, b := renderAPIServerBytes(t, st, p), renderAPIServerBytes(t, loadState(t, "cis"), want); !bytes.Equal(
			bytes.ReplaceAll(a, []byte(filepath.Dir(st.Profile.AuditPolicyFile)), []byte("/etc/stratum/profiles")), b) {
			t.Error("the apiserver rendered from LoadProfile differs from the golden profile's")
		}
	})
	t.Run("missing file", func(t *testing.T) {
		st, dir := cisStateIn(t)
		os.Remove(filepath.Join(dir, "audit-policy.yaml"))
		_, err := LoadProfile(st)
		mustMention(t, "LoadProfile", err, "profile.auditPolicyFile", st.Profile.AuditPolicyFile)
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("error %v does not wrap ErrNotExist", err)
		}
	})
	t.Run("symlink refused", func(t *testing.T) {
		st, dir := cisStateIn(t)
		link := filepath.Join(dir, "link.yaml")
		if err := os.Symlink(st.Profile.AdmissionConfigFile, link); err != nil {
			t.Fatal(err)
		}
		st.Profile.AdmissionConfigFile = link
		_, err := LoadProfile(st)
		mustMention(t, "LoadProfile", err, "profile.admissionConfigFile", link)
		if !errors.Is(err, durable.ErrSymlink) {
			t.Errorf("error %v is not ErrSymlink", err)
		}
	})
	t.Run("audit policy of the wrong kind", func(t *testing.T) {
		st, dir := cisStateIn(t)
		os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\n"), 0o600)
		_, err := LoadProfile(st)
		mustMention(t, "LoadProfile", err, "profile.auditPolicyFile", st.Profile.AuditPolicyFile, "audit.k8s.io/v1 Policy")
	})
	t.Run("audit policy not yaml", func(t *testing.T) {
		st, dir := cisStateIn(t)
		os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte("rules: [\n"), 0o600)
		_, err := LoadProfile(st)
		mustMention(t, "LoadProfile", err, "profile.auditPolicyFile", "not YAML")
	})
}

func renderAPIServerBytes(t *testing.T, st *nodestate.NodeState, p Profile) []byte {
	t.Helper()
	b, err := RenderBytes(st, p, nodestate.KubeAPIServer, "")
	if err != nil {
		t.Fatal(err)
	}
	return b
}
