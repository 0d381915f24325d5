package cli

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// adoptNode is a copy of the real kubeadm's manifests for one fixture
// (testdata/kubeadm) and an empty state directory beside it.
type adoptNode struct {
	t                           *testing.T
	manifests, states, cfg, dir string
}

func newAdoptNode(t *testing.T, version, config string) *adoptNode {
	t.Helper()
	dir := t.TempDir()
	fixture := filepath.Join("..", "..", "testdata", "kubeadm", version, config)
	n := &adoptNode{t: t, dir: dir, manifests: filepath.Join(dir, "manifests"), states: filepath.Join(dir, "state"), cfg: filepath.Join(fixture, "kubeadm.yaml")}
	if err := os.CopyFS(n.manifests, os.DirFS(filepath.Join(fixture, "manifests"))); err != nil {
		t.Fatal(err)
	}
	return n
}

// su runs stratum-upgrade args (text output) on the node in a child
// process and wants exit code want.
func (n *adoptNode) su(want int, args ...string) (stdout, stderr string) {
	n.t.Helper()
	argv := append([]string{"--manifest-dir", n.manifests, "--state-dir", n.states, "--proc-scope", "self"}, args...)
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatal(err)
	}
	if code != want {
		n.t.Fatalf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, o.String(), e.String())
	}
	return o.String(), e.String()
}

func (n *adoptNode) manifestBytes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(n.manifests)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(n.manifests, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// Without --yes, init --from-kubeadm shows and writes nothing; with it,
// the state is imported and every manifest becomes the render.
func TestInitFromKubeadm(t *testing.T) {
	n := newAdoptNode(t, "v1.37.2", "extra-args")
	before := n.manifestBytes(t)
	out, _ := n.su(ExitOK, "init", "--from-kubeadm", "--kubeadm-config", n.cfg)
	for _, want := range []string{
		"kubeadm node cp-1 (v1.37.2), manifests in " + n.manifests,
		"derived node state:\n", "  nodeName: cp-1\n", "  extraArgsOrder:\n",
		"etcd                     kept running: kubelet sees the same pod in the render",
		"kube-scheduler           kept running: kubelet sees the same pod in the render",
		"nothing written. To adopt the node: `stratum-upgrade init --from-kubeadm --kubeadm-config " + n.cfg + " --yes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(n.states); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("without --yes the state directory was made: %v", err)
	}
	if after := n.manifestBytes(t); !maps.Equal(before, after) {
		t.Error("without --yes a manifest changed")
	}

	n.su(ExitOK, "init", "--from-kubeadm", "--kubeadm-config", n.cfg, "--yes")
	status, _ := n.su(ExitOK, "status")
	if c := strings.Count(status, "rendered"); c < 4 {
		t.Errorf("status after adoption shows %d components rendered, want 4:\n%s", c, status)
	}
	// A second adoption is refused: the node is stratum's now.
	_, stderr := n.su(ExitError, "init", "--from-kubeadm", "--yes")
	if !strings.Contains(stderr, "already holds the node state of cp-1") {
		t.Errorf("second adoption: %s", stderr)
	}
}

// A component that would restart refuses --yes with the reason, and
// writes nothing; the flags that go with --from-kubeadm are checked.
func TestInitFromKubeadmRefuses(t *testing.T) {
	n := newAdoptNode(t, "v1.37.2", "defaults")
	sched := filepath.Join(n.manifests, "kube-scheduler.yaml")
	b, err := os.ReadFile(sched)
	if err != nil {
		t.Fatal(err)
	}
	// An argument that is no --flag: no node state field reproduces it.
	edited := strings.Replace(string(b), "    - kube-scheduler\n", "    - kube-scheduler\n    - -v=4\n", 1)
	if err := os.WriteFile(sched, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	before := n.manifestBytes(t)
	out, stderr := n.su(ExitError, "init", "--from-kubeadm", "--yes")
	if !strings.Contains(out, "kube-scheduler           WOULD RESTART: kubelet sees another pod in the render:\n    spec.containers[kube-scheduler].command") {
		t.Errorf("the restart is not explained:\n%s", out)
	}
	if !strings.Contains(stderr, "adopting this node would restart components (kube-scheduler; see why above); nothing written.") ||
		!strings.Contains(stderr, "--yes --allow-restart") {
		t.Errorf("refusal: %s", stderr)
	}
	if _, err := os.Stat(n.states); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused adoption made the state directory: %v", err)
	}
	if after := n.manifestBytes(t); !maps.Equal(before, after) {
		t.Error("a refused adoption changed a manifest")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from-kubeadm", "--state", "x.yaml"}, "--from-kubeadm and --state are exclusive"},
		{[]string{"--from-kubeadm", "--dry-run"}, "writes nothing without --yes"},
		{[]string{"--from-kubeadm", "--allow-restart"}, "--allow-restart goes with --yes"},
		{[]string{"--state", "x.yaml", "--yes"}, "--yes is for --from-kubeadm"},
		{[]string{"--state", "x.yaml", "--kubeadm-config", "k.yaml"}, "--kubeadm-config is for --from-kubeadm"},
	} {
		_, stderr := n.su(ExitUsage, append([]string{"init"}, c.args...)...)
		if !strings.Contains(stderr, c.want) {
			t.Errorf("init %v: %s, want %q", c.args, stderr, c.want)
		}
	}
	os.Remove(filepath.Join(n.manifests, "etcd.yaml"))
	_, stderr = n.su(ExitError, "init", "--from-kubeadm")
	if !strings.Contains(stderr, "external etcd") {
		t.Errorf("no etcd.yaml: %s", stderr)
	}
}
