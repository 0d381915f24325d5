package kubeletpod

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/versions"
)

// ruleCase is one file of testdata/kubelet-rules: a static pod and, on its
// first line, what kubelet does with it: "# kubelet: accepted", "# kubelet:
// refused <resource>" or "# kubelet: dropped <field path>". The tool
// modules' kubeletrules tests run the real kubelet on the same files and
// check the same line, so Check and kubelet agree through them.
type ruleCase struct {
	name, verdict, what string
	data                []byte
}

// ruleCases reads testdata/kubelet-rules.
func ruleCases(t *testing.T) []ruleCase {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "kubelet-rules", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cases in testdata/kubelet-rules: %v", err)
	}
	var out []ruleCase
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		rest, ok := strings.CutPrefix(first, "# kubelet: ")
		if !ok {
			t.Fatalf("%s: first line %q, want \"# kubelet: accepted|refused <resource>|dropped <field>\"", p, first)
		}
		verdict, what, _ := strings.Cut(rest, " ")
		out = append(out, ruleCase{name: filepath.Base(p), verdict: verdict, what: what, data: b})
	}
	return out
}

// TestCheckRuleCases: Check says of each case what its first line says
// kubelet does, for every supported kubelet minor.
func TestCheckRuleCases(t *testing.T) {
	seen := map[string]int{}
	for _, c := range ruleCases(t) {
		seen[c.verdict]++
		for _, minor := range versions.KubernetesMinors {
			ps, err := Check(c.data, "v"+minor+".0")
			if err != nil {
				t.Errorf("%s, kubelet %s: %v", c.name, minor, err)
				continue
			}
			switch c.verdict {
			case "accepted":
				if len(ps) != 0 {
					t.Errorf("%s, kubelet %s: problems %v, want none", c.name, minor, ps)
				}
			case "refused", "dropped":
				if len(ps) != 1 || ps[0].Refused != (c.verdict == "refused") || ps[0].What != c.what {
					t.Errorf("%s, kubelet %s: problems %+v, want one: %s %q", c.name, minor, ps, c.verdict, c.what)
				} else if !strings.Contains(ps[0].Message, c.what) || !strings.Contains(ps[0].Message, "kubelet "+minor) {
					t.Errorf("%s: message %q names neither %q nor kubelet %s", c.name, ps[0].Message, c.what, minor)
				}
			default:
				t.Fatalf("%s: verdict %q, want accepted, refused or dropped", c.name, c.verdict)
			}
		}
	}
	for _, v := range []string{"accepted", "refused", "dropped"} {
		if seen[v] == 0 {
			t.Errorf("no case is %s", v)
		}
	}
}

// TestCheckBadInput: what kubelet cannot read at all, and a version that is
// not one, are errors, never problems or a panic.
func TestCheckBadInput(t *testing.T) {
	pod := []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}]}\n")
	if ps, err := Check(pod, "v1.37.2"); err != nil || len(ps) != 0 {
		t.Fatalf("a plain pod: %v %v", ps, err)
	}
	for name, b := range map[string]string{
		"empty":      "",
		"not YAML":   "{[",
		"not a pod":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: p}\n",
		"no name":    "apiVersion: v1\nkind: Pod\nspec: {}\n",
		"wrong type": "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {hostNetwork: maybe}\n",
	} {
		if ps, err := Check([]byte(b), "v1.37.2"); !errors.Is(err, ErrNotAPod) {
			t.Errorf("%s: %v %v, want ErrNotAPod", name, ps, err)
		}
	}
	for _, v := range []string{"", "latest", "v2.0.0"} {
		if _, err := Check(pod, v); err == nil || errors.Is(err, ErrNotAPod) {
			t.Errorf("kubelet version %q: error %v, want one about the version", v, err)
		}
	}
}

// TestCheckKubeadmManifests: every manifest the real kubeadm wrote
// (testdata/kubeadm/<version>/<config>/manifests, make kubeadm-fixtures)
// is a pod its version's kubelet runs as written, so Check refuses none.
func TestCheckKubeadmManifests(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "testdata", "kubeadm", "v*", "*", "manifests", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no kubeadm fixtures: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(filepath.Join("..", "testdata", "kubeadm"), p)
		version, _, _ := strings.Cut(rel, string(filepath.Separator))
		if ps, err := Check(b, version); err != nil || len(ps) > 0 {
			t.Errorf("%s under kubelet %s: %v %v", rel, version, ps, err)
		}
	}
	t.Logf("%d kubeadm manifests", len(paths))
}
