package main

// These tests hold the pages to the real decoders: the examples decode and
// validate, a field is required exactly when the page says so, the
// defaults are what Parse fills in, and a value the page does not accept is
// refused, naming the field.

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// example reads an example file of docs/reference/examples/ generically.
func example(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "reference", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return doc
}

// marshal is doc's YAML.
func marshal(t *testing.T, doc map[string]any) []byte {
	t.Helper()
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// with is a deep copy of doc with path set to v, or removed when del.
func with(t *testing.T, doc map[string]any, path string, v any, del bool) []byte {
	t.Helper()
	var c map[string]any
	if err := yaml.Unmarshal(marshal(t, doc), &c); err != nil {
		t.Fatal(err)
	}
	keys := strings.Split(path, ".")
	m := c
	for _, k := range keys[:len(keys)-1] {
		sub, ok := m[k].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[k] = sub
		}
		m = sub
	}
	if del {
		delete(m, keys[len(keys)-1])
	} else {
		m[keys[len(keys)-1]] = v
	}
	return marshal(t, c)
}

// decodeState is how init reads a node state: parsed, then validated with
// what its versions say (resolve.Validate, which render runs too).
func decodeState(b []byte) error {
	st, err := nodestate.Parse(b)
	if err != nil {
		return err
	}
	return resolve.Validate(st)
}

// decodeRelease is how plan and run read a release: parsed, then applied
// to the node (the full example, which runs every component).
func decodeRelease(t *testing.T) func([]byte) error {
	st, err := nodestate.Parse(marshal(t, example(t, nodeStatePage.Full)))
	if err != nil {
		t.Fatal(err)
	}
	return func(b []byte) error {
		r, err := engine.ParseRelease(b)
		if err != nil {
			return err
		}
		_, err = r.Apply(st)
		return err
	}
}

func TestExamplesValid(t *testing.T) {
	root := repoRoot(t)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(root, "docs", "reference", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, name := range []string{nodeStatePage.Minimal, nodeStatePage.Full} {
		if _, err := nodestate.Parse(read(name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{releasePage.Minimal, releasePage.Full} {
		if _, err := engine.ParseRelease(read(name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Each release applies to each node state.
	for _, sn := range []string{nodeStatePage.Minimal, nodeStatePage.Full} {
		st, err := nodestate.Parse(read(sn))
		if err != nil {
			continue
		}
		for _, rn := range []string{releasePage.Minimal, releasePage.Full} {
			r, err := engine.ParseRelease(read(rn))
			if err != nil {
				continue
			}
			if _, err := r.Apply(st); err != nil {
				t.Errorf("%s applied to %s: %v", rn, sn, err)
			}
		}
	}
}

// A field is in the minimal example exactly when it is required; without
// a required field the minimal example is refused, naming the field; and
// without a conditionally required one, so is the full example (which
// meets every condition).
func TestRequired(t *testing.T) {
	for _, c := range []struct {
		s      spec
		decode func([]byte) error
	}{{nodeStatePage, decodeState}, {releasePage, decodeRelease(t)}} {
		minimal, full := example(t, c.s.Minimal), example(t, c.s.Full)
		for _, path := range sortedKeys(c.s.Fields) {
			in := c.s.Fields[path]
			_, inMinimal := lookup(minimal, path)
			if inMinimal != in.required() {
				t.Errorf("%s: %s: required %q, but the minimal example %s it", c.s.File, path, in.Required, map[bool]string{true: "sets", false: "does not set"}[inMinimal])
			}
			var err error
			switch {
			case in.required():
				err = c.decode(with(t, minimal, path, nil, true))
			case in.conditional():
				err = c.decode(with(t, full, path, nil, true))
			default:
				continue
			}
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("%s: %s is required (%s), but without it: %v", c.s.File, path, in.Required, err)
			}
		}
	}
}

// The value Parse fills in for each optional node state field absent from
// the minimal example ("" for none), and for the ports also when 0.
var defaults = map[string]string{
	"imageRepository":                    "", // Parse leaves it empty: NodeState.Repository reads it
	"images":                             "",
	"versions":                           "",
	"etcd.memberName":                    "cp-1",
	"etcd.initialCluster":                "cp-1=https://10.0.0.11:2380",
	"etcd.initialClusterState":           "new",
	"etcd.dataDir":                       "/var/lib/etcd",
	"etcd.terminationGracePeriodSeconds": "",
	"vip.address":                        "",
	"vip.interface":                      "",
	"profile.name":                       "default",
	"profile.auditPolicyFile":            "",
	"profile.admissionConfigFile":        "",
	"profile.auditLogDir":                "", // see TestCISAuditLogDirDefault
	"pkiDir":                             "/etc/kubernetes/pki",
	"kubeconfigDir":                      "/etc/kubernetes",
	"configDir":                          "/etc/kubernetes/stratum",
	"caCertDirs":                         "",
	"networking.serviceCIDR":             "10.96.0.0/12",
	"networking.podCIDR":                 "10.244.0.0/16",
	"networking.dnsDomain":               "cluster.local",
	"ports.etcdClient":                   "2379",
	"ports.etcdPeer":                     "2380",
	"ports.etcdMetrics":                  "2381",
	"ports.apiServer":                    "6443",
	"ports.controllerManager":            "10257",
	"ports.scheduler":                    "10259",
	"extraArgs":                          "",
	"extraArgsOrder":                     "",
	"stopped":                            "",
	"adoptedInputs":                      "",
	"extraVolumes":                       "",
	"extraEnvs":                          "",
	"resources":                          "",
	"patches.directory":                  "",
	"patches.files":                      "",
}

// parsed is the node state Parse makes of b, generically.
func parsed(t *testing.T, b []byte) map[string]any {
	t.Helper()
	st, err := nodestate.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

var codeSpan = regexp.MustCompile("^`([^`]*)`")

// Parse fills in the default the page gives each optional field.
func TestDefaults(t *testing.T) {
	p, err := load(repoRoot(t), nodeStatePage)
	if err != nil {
		t.Fatal(err)
	}
	minimal := example(t, nodeStatePage.Minimal)
	got := parsed(t, marshal(t, minimal))
	for _, f := range p.fields {
		in := nodeStatePage.Fields[f.Path]
		if f.Object || in.required() {
			continue
		}
		want, known := defaults[f.Path]
		if !known {
			t.Errorf("%s: optional, but the test does not know its default: add it to defaults", f.Path)
			continue
		}
		v, set := lookup(got, f.Path)
		if have := fmt.Sprint(v); want == "" && set || want != "" && have != want {
			t.Errorf("%s: Parse of the minimal example gives %v (set: %v), want %q", f.Path, v, set, want)
		}
		// A default that is a plain value is the one Parse fills in (a
		// conditional one, profile.auditLogDir's, has a test of its own).
		if m := codeSpan.FindStringSubmatch(in.Default); m != nil && want != "" && m[1] != want {
			t.Errorf("%s: the page says the default is %q; Parse fills in %q", f.Path, m[1], want)
		}
		if strings.HasPrefix(f.Path, "ports.") {
			zero := parsed(t, with(t, minimal, f.Path, 0, false))
			if v, _ := lookup(zero, f.Path); fmt.Sprint(v) != want {
				t.Errorf("%s: 0 becomes %v, want the default %s", f.Path, v, want)
			}
		}
	}
}

// profile.auditLogDir has a default with the cis profile only.
func TestCISAuditLogDirDefault(t *testing.T) {
	full := example(t, nodeStatePage.Full)
	got := parsed(t, with(t, full, "profile.auditLogDir", nil, true))
	if v, _ := lookup(got, "profile.auditLogDir"); v != nodestate.DefaultAuditLogDir {
		t.Errorf("cis profile without auditLogDir: %v, want %s", v, nodestate.DefaultAuditLogDir)
	}
	if !strings.HasPrefix(nodeStatePage.Fields["profile.auditLogDir"].Default, "`"+nodestate.DefaultAuditLogDir+"` with the cis profile") {
		t.Errorf("the page's default of profile.auditLogDir does not name %s", nodestate.DefaultAuditLogDir)
	}
}

func sortedKeys(m map[string]info) []string { return slices.Sorted(maps.Keys(m)) }
