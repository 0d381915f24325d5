package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/versions/kubeadm"
)

// newStateNode is a node imported with init --state from
// testdata/states/default.yaml (v1.34.4, etcd 3.5.35, every image pinned),
// its directories under the test's temporary directory.
func newStateNode(t *testing.T) *adoptNode {
	t.Helper()
	dir := t.TempDir()
	n := &adoptNode{t: t, dir: dir, manifests: filepath.Join(dir, "manifests"), states: filepath.Join(dir, "state")}
	b, err := os.ReadFile("../../testdata/states/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := strings.NewReplacer("dataDir: /var/lib/etcd", "dataDir: "+filepath.Join(dir, "etcd"),
		"pkiDir: /etc/kubernetes/pki", "pkiDir: "+filepath.Join(dir, "pki"),
		"kubeconfigDir: /etc/kubernetes", "kubeconfigDir: "+filepath.Join(dir, "kube"),
		"configDir: /etc/kubernetes/stratum", "configDir: "+filepath.Join(dir, "config")).Replace(string(b))
	n.write("state.yaml", st)
	n.su(ExitOK, "init", "--state", n.path("state.yaml"))
	return n
}

func (n *adoptNode) path(name string) string { return filepath.Join(n.dir, name) }

func (n *adoptNode) write(name, content string) {
	n.t.Helper()
	if err := os.WriteFile(n.path(name), []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

const releaseHead = "apiVersion: stratum.ciq.com/v1\nkind: Release\n"

// A release or node state whose kubernetesVersion is not kube-apiserver's
// version is refused (exit 1), naming both; before, plan took the
// release and the node state would have said v1.35.0 while every
// Kubernetes component stayed at v1.34.4 or v1.34.5.
func TestKubernetesVersionMustBeKubeAPIServers(t *testing.T) {
	n := newStateNode(t)
	n.write("mismatch.yaml", releaseHead+"kubernetesVersion: v1.35.0\nimages:\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.5\n")
	_, stderr := n.su(ExitError, "plan", "--to", n.path("mismatch.yaml"))
	for _, want := range []string{"kubernetesVersion v1.35.0", "kube-apiserver", "registry.k8s.io/kube-apiserver:v1.34.4", "v1.34.4"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("plan --to mismatch.yaml: stderr lacks %q:\n%s", want, stderr)
		}
	}
	n.su(ExitError, "run", "--to", n.path("mismatch.yaml"))
	// A release naming kube-apiserver at another version than its own.
	n.write("self-mismatch.yaml", releaseHead+"kubernetesVersion: v1.34.5\nimages:\n  kube-apiserver: registry.k8s.io/kube-apiserver:v1.34.6\n")
	if _, stderr := n.su(ExitError, "plan", "--to", n.path("self-mismatch.yaml")); !strings.Contains(stderr, "kubernetesVersion v1.34.5 disagrees with kube-apiserver's image registry.k8s.io/kube-apiserver:v1.34.6 (version v1.34.6)") {
		t.Errorf("plan --to self-mismatch.yaml: %s", stderr)
	}

	// The same as a node state.
	b, err := os.ReadFile(n.path("state.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n.write("mismatch-state.yaml", strings.Replace(string(b), "kubernetesVersion: v1.34.4", "kubernetesVersion: v1.35.0", 1))
	_, stderr = n.su(ExitError, "plan", "--state", n.path("mismatch-state.yaml"))
	if !strings.Contains(stderr, "kubernetesVersion v1.35.0") || !strings.Contains(stderr, "kube-apiserver:v1.34.4") {
		t.Errorf("plan --state mismatch-state.yaml: %s", stderr)
	}

	// init refuses such a node state too, before anything is created.
	fresh := &adoptNode{t: t, dir: n.dir, manifests: filepath.Join(n.dir, "fresh-manifests"), states: filepath.Join(n.dir, "fresh-state")}
	for _, args := range [][]string{{"init", "--dry-run", "--state", n.path("mismatch-state.yaml")}, {"init", "--state", n.path("mismatch-state.yaml")}} {
		if _, stderr := fresh.su(ExitError, args...); !strings.Contains(stderr, "kubernetesVersion v1.35.0 disagrees with kube-apiserver's image") {
			t.Errorf("%v: %s", args, stderr)
		}
	}
	if _, err := os.Stat(fresh.states); err == nil {
		t.Error("init of a mismatched node state made the state directory")
	}

	// By version, one minor at a time: v1.34 -> v1.36 is refused by the
	// pre-flight check, naming the minor to go through.
	if _, stderr := n.su(ExitError, "plan", "--to", "v1.36.3"); !strings.Contains(stderr, "KubernetesMinorSkip] kube-apiserver v1.34.4 -> v1.36.3 skips 1.35") {
		t.Errorf("plan --to v1.36.3 from v1.34.4: %s", stderr)
	}

	// A release that moves kube-apiserver with kubernetesVersion is taken.
	n.write("ok.yaml", releaseHead+"kubernetesVersion: v1.34.5\nimages:\n  kube-apiserver: registry.k8s.io/kube-apiserver:v1.34.5\n")
	out, _ := n.su(ExitOK, "plan", "--to", n.path("ok.yaml"))
	if !strings.Contains(out, "upgrade v1.34.4 -> v1.34.5 changes 1 manifest(s): kube-apiserver") {
		t.Errorf("plan --to ok.yaml:\n%s", out)
	}
}

// On a node adopted from the real kubeadm's v1.36.3 manifests, plan lists
// the next minor, kubeadm's way, and plan --to v1.37.2 moves every
// Kubernetes component and etcd (to kubeadm 1.37's 3.7.0) in the node's
// repository. etcd 3.6.8 -> 3.7.0 is what etcd's upgrade guide refuses
// (3.6.11 first), and both say so.
func TestPlanByVersionOnAdoptedKubeadmNode(t *testing.T) {
	n := newAdoptNode(t, "v1.36.3", "defaults")
	n.su(ExitOK, "init", "--from-kubeadm", "--kubeadm-config", n.cfg, "--yes")

	out, _ := n.su(ExitOK, "plan")
	for _, want := range []string{
		"Upgrade to the latest version of the next minor, v1.37:",
		"COMPONENT                 NODE      CURRENT   TARGET\n",
		"etcd                      cp-1      3.6.8     3.7.0\n",
		"kube-apiserver            cp-1      v1.36.3   v1.37.2\n",
		"kube-controller-manager   cp-1      v1.36.3   v1.37.2\n",
		"kube-scheduler            cp-1      v1.36.3   v1.37.2\n",
		"[EtcdMinimumPatch] etcd 3.6.8 -> 3.7.0",
		"\tstratum-upgrade run --to v1.37.2 --state-dir " + n.states,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "v1.36 series") {
		t.Errorf("plan offers a patch of v1.36 though v1.36.3 is the newest known:\n%s", out)
	}

	_, stderr := n.su(ExitError, "plan", "--to", "v1.37.2")
	if !strings.Contains(stderr, "EtcdMinimumPatch] etcd 3.6.8 -> 3.7.0") {
		t.Errorf("plan --to v1.37.2 from etcd 3.6.8: %s", stderr)
	}
	out, _ = n.su(ExitOK, "plan", "--to", "v1.37.2", "--ignore-preflight-errors", "EtcdMinimumPatch,EtcdHealth")
	if !strings.Contains(out, "upgrade v1.36.3 -> v1.37.2 changes 4 manifest(s): etcd, kube-apiserver, kube-controller-manager, kube-scheduler") {
		t.Errorf("plan --to v1.37.2:\n%s", out)
	}
	for _, want := range []string{"+    image: registry.k8s.io/etcd:3.7.0-0", "+    image: registry.k8s.io/kube-apiserver:v1.37.2",
		"+    image: registry.k8s.io/kube-controller-manager:v1.37.2", "+    image: registry.k8s.io/kube-scheduler:v1.37.2", "(version v1.37.2)"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan --to v1.37.2 lacks %q", want)
		}
	}

	// Never down, and only versions.
	_, stderr = n.su(ExitError, "plan", "--to", "v1.36.1")
	if !strings.Contains(stderr, "upgrade to v1.36.1: older than the node's v1.36.3") {
		t.Errorf("plan --to v1.36.1: %s", stderr)
	}
	_, stderr = n.su(ExitUsage, "run", "--to", "1.37")
	if !strings.Contains(stderr, "--to 1.37: not a Kubernetes version") {
		t.Errorf("run --to 1.37: %s", stderr)
	}
	// The node at the newest version the table knows has nothing to offer.
	n2 := newAdoptNode(t, "v1.37.2", "defaults")
	n2.su(ExitOK, "init", "--from-kubeadm", "--kubeadm-config", n2.cfg, "--yes")
	if out, _ := n2.su(ExitOK, "plan"); !strings.Contains(out, "node cp-1 runs v1.37.2: the version table (docs/versions.md) knows no newer patch of its minor and no next minor") {
		t.Errorf("plan on v1.37.2:\n%s", out)
	}
}

// state prints the journal's node state; fed back to plan --state, as YAML
// or JSON, it plans nothing: on a node imported from a file and on one
// adopted from kubeadm (extra args in kubeadm's order, adopted inputs).
func TestStateRoundTrip(t *testing.T) {
	adopted := newAdoptNode(t, "v1.36.3", "extra-args")
	adopted.su(ExitOK, "init", "--from-kubeadm", "--kubeadm-config", adopted.cfg, "--yes")
	for name, n := range map[string]*adoptNode{"imported": newStateNode(t), "adopted": adopted} {
		for _, format := range []string{"yaml", "json"} {
			out, _ := n.su(ExitOK, "state", "-o", format)
			file := "state-out." + format
			n.write(file, out)
			plan, _ := n.su(ExitOK, "plan", "--state", n.path(file))
			if !strings.Contains(plan, "nothing to do") {
				t.Errorf("%s: plan --state of state -o %s plans something:\n%s\nstate:\n%s", name, format, plan, out)
			}
		}
	}
	out, _ := adopted.su(ExitOK, "state")
	for _, want := range []string{"# The node state of cp-1 in journal " + adopted.states, "apply --state FILE --state-dir " + adopted.states,
		"\napiVersion: stratum.ciq.com/v1\nkind: NodeState\nnodeName: cp-1\n", "\nextraArgsOrder:\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("state lacks %q:\n%s", want, out)
		}
	}
	// An edited state plans the edit.
	n := newStateNode(t)
	out, _ = n.su(ExitOK, "state")
	n.write("edited.yaml", strings.Replace(out, "kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.4", "kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.5", 1))
	if plan, _ := n.su(ExitOK, "plan", "--state", n.path("edited.yaml")); !strings.Contains(plan, "changes 1 manifest(s): kube-scheduler") {
		t.Errorf("plan --state of an edited state:\n%s", plan)
	}
}

// On every kubeadm fixture's defaults node whose minor has a next one in
// the version table, plan offers that minor's newest version for etcd and
// every Kubernetes component, and plan --to it changes all four manifests.
func TestPlanNextMinorOnEveryKubeadmFixture(t *testing.T) {
	dirs, err := filepath.Glob("../../testdata/kubeadm/v*/defaults")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no kubeadm fixtures: %v", err)
	}
	checked := 0
	for _, dir := range dirs {
		ver := filepath.Base(filepath.Dir(dir))
		next, ok := kubeadm.Next(version.MustParseSemantic(ver))
		if !ok {
			continue
		}
		t.Run(ver, func(t *testing.T) {
			n := newAdoptNode(t, ver, "defaults")
			n.su(ExitOK, "init", "--from-kubeadm", "--kubeadm-config", n.cfg, "--yes")
			out, _ := n.su(ExitOK, "plan", "-o", "json")
			var rep availableReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("plan -o json: %v\n%s", err, out)
			}
			last := rep.Upgrades[len(rep.Upgrades)-1]
			etcdTag, _ := kubeadm.EtcdTag(version.MustParseSemantic(next.Newest()))
			want := map[string]string{"etcd": "registry.k8s.io/etcd:" + etcdTag}
			for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				want[c] = "registry.k8s.io/" + c + ":" + next.Newest()
			}
			if last.Version != next.Newest() || len(last.Components) != 4 {
				t.Fatalf("plan: last upgrade %+v, want %s with 4 components", last, next.Newest())
			}
			for _, c := range last.Components {
				if c.Image != want[c.Component] {
					t.Errorf("plan: %s -> %s, want %s", c.Component, c.Image, want[c.Component])
				}
			}
			out, _ = n.su(ExitOK, "plan", "--to", next.Newest(), "--ignore-preflight-errors", "all")
			if !strings.Contains(out, "changes 4 manifest(s): etcd, kube-apiserver, kube-controller-manager, kube-scheduler") {
				t.Errorf("plan --to %s:\n%s", next.Newest(), out)
			}
		})
		checked++
	}
	if checked == 0 {
		t.Fatal("no fixture of a minor with a next one in the version table")
	}
}
