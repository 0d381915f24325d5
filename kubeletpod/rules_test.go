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
// refused <resource>" (a static pod referencing an API object), "# kubelet:
// invalid <field path>" (kubelet's validation refuses the file) or "#
// kubelet: dropped <field path>". Lines right after it such as "# kubelet
// 1.34: invalid <field path>" say what one minor's kubelet does instead.
// The tool modules' kubeletrules tests run the real kubelet on the same
// files and check the same lines, so Check and kubelet agree through them.
type ruleCase struct {
	name    string
	verdict map[string]string // by minor, "" for every other minor
	data    []byte
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
		c := ruleCase{name: filepath.Base(p), verdict: map[string]string{}, data: b}
		for i, line := range strings.Split(string(b), "\n") {
			rest, ok := strings.CutPrefix(line, "# kubelet")
			if !ok {
				break
			}
			minor, verdict, ok := strings.Cut(rest, ": ")
			minor = strings.TrimSpace(minor)
			if _, dup := c.verdict[minor]; !ok || dup || (i == 0) != (minor == "") {
				t.Fatalf("%s: line %q, want \"# kubelet: accepted|refused <resource>|invalid <field>|dropped <field>\" first, then \"# kubelet 1.NN: ...\"", p, line)
			}
			c.verdict[minor] = verdict
		}
		if _, ok := c.verdict[""]; !ok {
			t.Fatalf("%s: no \"# kubelet: ...\" first line", p)
		}
		out = append(out, c)
	}
	return out
}

// For is the verdict ("accepted", "refused", "invalid", "dropped") and
// what it names for kubelet minor.
func (c ruleCase) For(minor string) (verdict, what string) {
	v, ok := c.verdict[minor]
	if !ok {
		v = c.verdict[""]
	}
	verdict, what, _ = strings.Cut(v, " ")
	return verdict, what
}

// TestCheckRuleCases: Check says of each case what its first line says
// kubelet does, for every supported kubelet minor.
func TestCheckRuleCases(t *testing.T) {
	seen := map[string]int{}
	for _, c := range ruleCases(t) {
		for _, minor := range versions.KubernetesMinors {
			verdict, what := c.For(minor)
			seen[verdict]++
			ps, err := Check(c.data, "v"+minor+".0")
			if err != nil {
				t.Errorf("%s, kubelet %s: %v", c.name, minor, err)
				continue
			}
			switch verdict {
			case "accepted":
				if len(ps) != 0 {
					t.Errorf("%s, kubelet %s: problems %v, want none", c.name, minor, ps)
				}
			case "refused", "invalid", "dropped":
				if len(ps) != 1 || ps[0].Refused != (verdict != "dropped") || ps[0].What != what {
					t.Errorf("%s, kubelet %s: problems %+v, want one: %s %q", c.name, minor, ps, verdict, what)
				} else if !strings.Contains(ps[0].Message, what) || !strings.Contains(ps[0].Message, "kubelet "+minor) {
					t.Errorf("%s: message %q names neither %q nor kubelet %s", c.name, ps[0].Message, what, minor)
				}
			default:
				t.Fatalf("%s: verdict %q, want accepted, refused, invalid or dropped", c.name, verdict)
			}
		}
	}
	for _, v := range []string{"accepted", "refused", "invalid", "dropped"} {
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

// TestCheckRestartPolicyMessage: kubelet 1.34's refusal of a container's
// own restartPolicy tells the operator both ways out; 1.35 runs the pod.
func TestCheckRestartPolicyMessage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "kubelet-rules", "restart-policy-never.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Check(b, "v1.34.4")
	if err != nil || len(ps) != 1 {
		t.Fatalf("kubelet 1.34: %v %v, want one problem", ps, err)
	}
	for _, s := range []string{"kubelet 1.34 refuses", "spec.containers[0].restartPolicy: Never", "would not run this pod", "remove it from the patch", "set it again once the node's kubelet runs 1.35"} {
		if !strings.Contains(ps[0].Message, s) {
			t.Errorf("message %q does not say %q", ps[0].Message, s)
		}
	}
	t.Log(ps[0].Message)
	if ps, err := Check(b, "v1.35.4"); err != nil || len(ps) != 0 {
		t.Errorf("kubelet 1.35: %v %v, want none", ps, err)
	}
}
