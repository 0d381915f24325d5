package manifest

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// mergedPlugins decodes the derived admission file of st with admission as
// the profile's admission file.
func mergedPlugins(t *testing.T, st *nodestate.NodeState, admission string) map[string]admissionPlugin {
	t.Helper()
	return mergedPluginsWith(t, st, admission, nil)
}

// mergedPluginsWith is mergedPlugins with paths as the contents of the
// admission file's path: plugins.
func mergedPluginsWith(t *testing.T, st *nodestate.NodeState, admission string, paths map[string][]byte) map[string]admissionPlugin {
	t.Helper()
	files, err := DerivedFiles(st, Profile{AuditPolicy: []byte("x"), AdmissionConfig: []byte(admission), AdmissionPaths: paths})
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
		zeta := map[string][]byte{"/etc/stratum/zeta.yaml": []byte("apiVersion: zeta.example.com/v1\nkind: ZetaConfiguration\nlevel: 3\n")}
		got := mergedPluginsWith(t, st, head+`plugins:
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
`, zeta)
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
		if z := got["ZetaWebhook"]; z.Path != "" || configOf(t, z)["level"] != float64(3) {
			t.Errorf("path plugin not inlined: %+v", z)
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

// admissionHead starts every AdmissionConfiguration the path tests write.
const admissionHead = "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\n"

// pathNode is the cis testdata state with its profile files in a temp dir,
// the admission file at <dir>/etc/admission.yaml holding doc (every {{dir}}
// replaced by the temp dir), and files written under dir (path relative to
// it: content).
func pathNode(t *testing.T, doc string, files map[string][]byte) (*nodestate.NodeState, string) {
	t.Helper()
	st, dir := cisStateIn(t)
	for rel, b := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st.Profile.AdmissionConfigFile = filepath.Join(dir, "etc", "admission.yaml")
	if err := os.MkdirAll(filepath.Dir(st.Profile.AdmissionConfigFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(st.Profile.AdmissionConfigFile, []byte(strings.ReplaceAll(doc, "{{dir}}", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// derivedAdmission is the merged admission file rendered from st's profile
// files as LoadProfile reads them, decoded.
func derivedAdmission(t *testing.T, st *nodestate.NodeState) ([]byte, map[string]admissionPlugin) {
	t.Helper()
	prof, err := LoadProfile(st)
	if err != nil {
		t.Fatal(err)
	}
	files, err := DerivedFiles(st, prof)
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
	out := map[string]admissionPlugin{}
	for _, p := range ac.Plugins {
		out[p.Name] = p
	}
	return files[0].Data, out
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	return readFile(t, filepath.Join("testdata", "admission-paths", name))
}

// TestAdmissionPathInlined checks that a plugin configured by path: reaches
// the merged file as the referenced file's content, inline: the merged file
// lives in configDir, where the apiserver would resolve a relative path
// against the wrong directory.
func TestAdmissionPathInlined(t *testing.T) {
	erl, ps := fixture(t, "eventratelimit.yaml"), fixture(t, "podsecurity.json")
	cases := []struct {
		name  string
		doc   string
		files map[string][]byte
		// want is, per plugin, the fixture its configuration must equal.
		want map[string][]byte
	}{
		{"relative, same directory, yaml",
			"plugins:\n- name: EventRateLimit\n  path: erl.yaml\n",
			map[string][]byte{"etc/erl.yaml": erl},
			map[string][]byte{"EventRateLimit": erl}},
		{"relative, nested directory",
			"plugins:\n- name: EventRateLimit\n  path: plugins/admission/erl.yaml\n",
			map[string][]byte{"etc/plugins/admission/erl.yaml": erl},
			map[string][]byte{"EventRateLimit": erl}},
		{"relative, dot and dot-dot",
			"plugins:\n- name: EventRateLimit\n  path: ./../shared/erl.yaml\n",
			map[string][]byte{"shared/erl.yaml": erl},
			map[string][]byte{"EventRateLimit": erl}},
		{"relative, json",
			"plugins:\n- name: PodSecurity\n  path: podsecurity.json\n",
			map[string][]byte{"etc/podsecurity.json": ps},
			map[string][]byte{"PodSecurity": ps}},
		{"absolute, elsewhere, json",
			"plugins:\n- name: PodSecurity\n  path: {{dir}}/elsewhere/ps.json\n",
			map[string][]byte{"elsewhere/ps.json": ps},
			map[string][]byte{"PodSecurity": ps}},
		{"both built-ins replaced, one added, mixed with inline",
			"plugins:\n- name: PodSecurity\n  path: ps.json\n- name: EventRateLimit\n  path: {{dir}}/erl.yaml\n" +
				"- name: ResourceQuota\n  path: rq.yaml\n- name: AlwaysPullImages\n  configuration: {kind: Anything}\n",
			map[string][]byte{"etc/ps.json": ps, "erl.yaml": erl, "etc/rq.yaml": []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: ResourceQuotaConfiguration\n")},
			map[string][]byte{"PodSecurity": ps, "EventRateLimit": erl, "ResourceQuota": []byte(`{"apiVersion": "apiserver.config.k8s.io/v1", "kind": "ResourceQuotaConfiguration"}`), "AlwaysPullImages": []byte("kind: Anything")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _ := pathNode(t, admissionHead+c.doc, c.files)
			data, got := derivedAdmission(t, st)
			if bytes.Contains(data, []byte("path:")) {
				t.Errorf("merged file keeps a path:\n%s", data)
			}
			for name, want := range c.want {
				p, ok := got[name]
				if !ok {
					t.Errorf("plugin %s missing from the merged file", name)
					continue
				}
				if p.Path != "" || len(p.Configuration) == 0 {
					t.Errorf("plugin %s: path %q, configuration %s: not inlined", name, p.Path, p.Configuration)
					continue
				}
				var wantCfg map[string]any
				if err := yaml.Unmarshal(want, &wantCfg); err != nil {
					t.Fatal(err)
				}
				if gotCfg := configOf(t, p); !reflect.DeepEqual(gotCfg, wantCfg) {
					t.Errorf("plugin %s: configuration %v, want the referenced file's %v", name, gotCfg, wantCfg)
				}
			}
			// A built-in nobody replaced stays.
			for _, b := range cisAdmissionPlugins {
				if _, ok := got[b.Name]; !ok {
					t.Errorf("built-in %s lost", b.Name)
				}
			}
			// The apiserver renders from the same profile.
			prof, err := LoadProfile(st)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Render(st, prof, nodestate.KubeAPIServer, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAdmissionPathErrors checks that every bad path: is an error of
// LoadProfile naming the admission file, the plugin and the referenced file.
func TestAdmissionPathErrors(t *testing.T) {
	doc := admissionHead + "plugins:\n- name: EventRateLimit\n  path: erl.yaml\n"
	cases := []struct {
		name  string
		doc   string
		setup func(t *testing.T, ref string) // ref: the referenced file's absolute path
		want  []string
		is    error
	}{
		{"does not exist", doc, func(t *testing.T, ref string) {}, []string{"no such file"}, fs.ErrNotExist},
		{"a directory", doc, func(t *testing.T, ref string) {
			if err := os.Mkdir(ref, 0o755); err != nil {
				t.Fatal(err)
			}
		}, []string{"not a regular file"}, durable.ErrNotRegular},
		{"a fifo", doc, func(t *testing.T, ref string) {
			if err := syscall.Mkfifo(ref, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"not a regular file"}, durable.ErrNotRegular},
		{"a symlink to a regular file", doc, func(t *testing.T, ref string) {
			target := filepath.Join(filepath.Dir(ref), "real.yaml")
			if err := os.WriteFile(target, fixture(t, "eventratelimit.yaml"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, ref); err != nil {
				t.Fatal(err)
			}
		}, []string{"symbolic link"}, durable.ErrSymlink},
		{"unreadable", doc, func(t *testing.T, ref string) {
			if os.Geteuid() == 0 {
				t.Skip("root reads a mode 0000 file")
			}
			if err := os.WriteFile(ref, fixture(t, "eventratelimit.yaml"), 0); err != nil {
				t.Fatal(err)
			}
		}, []string{"permission denied"}, fs.ErrPermission},
		{"not yaml", doc, writeRef("limits: [\n"), []string{"not valid YAML or JSON"}, nil},
		{"not json", doc, writeRef(`{"kind": "Configuration",`), []string{"not valid YAML or JSON"}, nil},
		{"empty", doc, writeRef("\n# nothing\n"), []string{"empty"}, nil},
		{"a list", doc, writeRef("- kind: Configuration\n"), []string{"not an object"}, nil},
		{"a scalar", doc, writeRef("Configuration\n"), []string{"not an object"}, nil},
		{"no kind", doc, writeRef("apiVersion: eventratelimit.admission.k8s.io/v1alpha1\nlimits: []\n"), []string{"apiVersion and kind"}, nil},
		{"duplicate key", doc, writeRef("apiVersion: a/v1\nkind: A\nkind: B\n"), []string{"not valid YAML or JSON"}, nil},
		{"path and configuration", admissionHead + "plugins:\n- name: EventRateLimit\n  path: erl.yaml\n  configuration: {kind: X}\n",
			writeRef("apiVersion: a/v1\nkind: A\n"), []string{"both a path and a configuration"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _ := pathNode(t, c.doc, nil)
			ref := filepath.Join(filepath.Dir(st.Profile.AdmissionConfigFile), "erl.yaml")
			c.setup(t, ref)
			_, err := LoadProfile(st)
			wants := append([]string{"profile.admissionConfigFile", st.Profile.AdmissionConfigFile, "EventRateLimit"}, c.want...)
			if c.name != "path and configuration" {
				wants = append(wants, ref)
			}
			mustMention(t, "LoadProfile", err, wants...)
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
		})
	}
}

// writeRef is a setup writing content to the referenced file.
func writeRef(content string) func(t *testing.T, ref string) {
	return func(t *testing.T, ref string) {
		if err := os.WriteFile(ref, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAdmissionPathUnread checks that a Profile that does not carry a
// path: plugin's file (not read by LoadProfile) is an error of DerivedFiles
// and of the apiserver's Render, not a merged file with the path in it.
func TestAdmissionPathUnread(t *testing.T) {
	st := loadState(t, "cis")
	prof := Profile{AuditPolicy: []byte("x"), AdmissionConfig: []byte(admissionHead + "plugins:\n- name: EventRateLimit\n  path: erl.yaml\n")}
	_, err := DerivedFiles(st, prof)
	mustMention(t, "DerivedFiles", err, st.Profile.AdmissionConfigFile, "EventRateLimit", "erl.yaml", "LoadProfile")
	_, err = Render(st, prof, nodestate.KubeAPIServer, "")
	mustMention(t, "Render", err, st.Profile.AdmissionConfigFile, "EventRateLimit", "erl.yaml", "LoadProfile")
	// The other components do not need the admission configuration.
	if _, err := Render(st, prof, nodestate.Etcd, ""); err != nil {
		t.Errorf("etcd: %v", err)
	}
}

// TestAdmissionPathHash checks that the apiserver's admission hash follows
// the referenced file's bytes, so kubelet restarts the apiserver onto an
// edited file, and that an edit the render does not read changes nothing.
func TestAdmissionPathHash(t *testing.T) {
	doc := admissionHead + "plugins:\n- name: EventRateLimit\n  path: plugins/erl.yaml\n"
	erl := fixture(t, "eventratelimit.yaml")
	type rendered struct{ manifest, derived []byte }
	render := func(t *testing.T, st *nodestate.NodeState) rendered {
		t.Helper()
		prof, err := LoadProfile(st)
		if err != nil {
			t.Fatal(err)
		}
		files, err := DerivedFiles(st, prof)
		if err != nil {
			t.Fatal(err)
		}
		return rendered{renderAPIServerBytes(t, st, prof), files[0].Data}
	}
	annotation := func(t *testing.T, manifest []byte) string {
		t.Helper()
		pod, err := DecodePod(manifest)
		if err != nil {
			t.Fatal(err)
		}
		a := pod.Annotations[AdmissionConfigAnnotation]
		if len(a) != 64 {
			t.Fatalf("admission annotation %q", a)
		}
		return a
	}
	cases := []struct {
		name                          string
		edit                          func(t *testing.T, dir string)
		annotationMoves, derivedMoves bool
	}{
		{"nothing", func(t *testing.T, dir string) {}, false, false},
		{"referenced file's content", func(t *testing.T, dir string) {
			writeRef(strings.Replace(string(erl), "qps: 5", "qps: 7", 1))(t, filepath.Join(dir, "etc", "plugins", "erl.yaml"))
		}, true, true},
		{"referenced file's comment", func(t *testing.T, dir string) {
			writeRef(string(erl)+"# reviewed\n")(t, filepath.Join(dir, "etc", "plugins", "erl.yaml"))
		}, true, false},
		{"referenced file rewritten as json", func(t *testing.T, dir string) {
			writeRef(`{"apiVersion": "eventratelimit.admission.k8s.io/v1alpha1", "kind": "Configuration", "limits": [{"type": "Namespace", "qps": 5, "burst": 10, "cacheSize": 2000}]}`)(t, filepath.Join(dir, "etc", "plugins", "erl.yaml"))
		}, true, false},
		{"unrelated file beside it", func(t *testing.T, dir string) {
			writeRef("apiVersion: a/v1\nkind: Other\n")(t, filepath.Join(dir, "etc", "plugins", "other.yaml"))
		}, false, false},
		{"the path resolved against configDir", func(t *testing.T, dir string) {
			// What the apiserver would read were the relative path left
			// in the merged file, which lives in configDir: not an input.
			p := filepath.Join(dir, "config", "plugins", "erl.yaml")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			writeRef("apiVersion: a/v1\nkind: Other\n")(t, p)
		}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, dir := pathNode(t, doc, map[string][]byte{"etc/plugins/erl.yaml": erl})
			st.ConfigDir = filepath.Join(dir, "config")
			before := render(t, st)
			c.edit(t, dir)
			after := render(t, st)
			if moved := annotation(t, after.manifest) != annotation(t, before.manifest); moved != c.annotationMoves {
				t.Errorf("admission annotation moved = %v, want %v", moved, c.annotationMoves)
			}
			if moved := !bytes.Equal(after.derived, before.derived); moved != c.derivedMoves {
				t.Errorf("merged file moved = %v, want %v\n%s\n---\n%s", moved, c.derivedMoves, before.derived, after.derived)
			}
			if !c.annotationMoves && !bytes.Equal(after.manifest, before.manifest) {
				t.Error("the apiserver manifest changed without its admission annotation")
			}
		})
	}
}

// TestAdmissionHashFollowsMergedFile checks that the admission hash moves
// when the merged file does though no input file changed: the built-ins
// are part of it, and a binary that changes them must restart the
// apiserver onto them (its derived file is written only with its
// manifest).
func TestAdmissionHashFollowsMergedFile(t *testing.T) {
	st := loadState(t, "cis")
	prof := testProfile(t, st)
	before := renderPod(t, st, prof, nodestate.KubeAPIServer, "").Annotations[AdmissionConfigAnnotation]
	saved := cisAdmissionPlugins
	t.Cleanup(func() { cisAdmissionPlugins = saved })
	cisAdmissionPlugins = slices.Clone(saved)
	for i, p := range cisAdmissionPlugins {
		if p.Name == "EventRateLimit" {
			cisAdmissionPlugins[i].Configuration = bytes.Replace(bytes.Clone(p.Configuration), []byte(`"qps": 50`), []byte(`"qps": 60`), 1)
		}
	}
	files, err := DerivedFiles(st, prof)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(files[0].Data, []byte("qps: 60")) {
		t.Fatalf("built-in not changed:\n%s", files[0].Data)
	}
	if after := renderPod(t, st, prof, nodestate.KubeAPIServer, "").Annotations[AdmissionConfigAnnotation]; after == before {
		t.Error("the merged file changed, the admission annotation did not")
	}
}
