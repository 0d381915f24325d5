package cli

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/cri-client/pkg/fake"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// imagesOf is the "image" of every object in a JSON list.
func imagesOf(v any) []string {
	var out []string
	for _, o := range v.([]any) {
		m := o.(map[string]any)
		out = append(out, fmt.Sprintf("%s present=%v rollback=%v pulled=%v", m["image"], m["present"], m["rollback"], m["pulled"]))
	}
	return out
}

// images list, plan's images and images pull against k8s.io/cri-client's
// fake CRI server holding the node's current images (what a runtime holds
// cannot be chosen here without root; e2e/registry_test.go runs them
// against containerd and a registry).
func TestImagesCommands(t *testing.T) {
	n := newJSONNode(t)
	n.su(ExitOK, "write.json", "init", "--state", n.path("state.yaml"))
	list := n.su(ExitOK, "images.json", "images", "list", "--to", n.path("sched.yaml"))
	st, err := nodestate.Load("../../testdata/states/default-vip.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want, current []string
	for _, comp := range manifest.NamesFor(st) {
		img := st.Images[comp]
		current = append(current, img)
		if comp == nodestate.Scheduler {
			img = "registry.k8s.io/kube-scheduler:v1.34.5" // sched.yaml's
		}
		want = append(want, img+" present=<nil> rollback=<nil> pulled=<nil>")
	}
	got := imagesOf(list[0]["images"])
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("images list:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	f := fake.NewFakeRemoteRuntime()
	f.ImageService.SetFakeImageSize(1 << 20)
	f.ImageService.SetFakeImages(current)
	sock := "unix://" + filepath.Join(t.TempDir(), "cri.sock")
	if err := f.Start(sock); err != nil {
		t.Fatal(err)
	}
	defer f.Stop()

	plan := n.su(ExitOK, "plan.json", "plan", "--to", n.path("sched.yaml"), "--cri-socket", sock)
	got = imagesOf(plan[0]["images"])
	want = []string{
		"registry.k8s.io/kube-scheduler:v1.34.5 present=false rollback=false pulled=<nil>",
		"registry.k8s.io/kube-scheduler:v1.34.4 present=true rollback=true pulled=<nil>",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("plan's images:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	why := "failed to resolve reference \"registry.k8s.io/kube-scheduler:v1.34.5\": not found"
	f.ImageService.InjectError("PullImage", status.Error(codes.NotFound, why))
	fail := n.su(ExitError, "images.json", "images", "pull", "--to", n.path("sched.yaml"), "--cri-socket", sock)
	errLine, _ := fail[len(fail)-1]["error"].(map[string]any)
	if msg, _ := errLine["message"].(string); !strings.Contains(msg, why) || !strings.Contains(msg, "registry.k8s.io/kube-scheduler:v1.34.5") {
		t.Fatalf("images pull with a failing pull: %v; want the image and the runtime's reason", fail[len(fail)-1])
	}
	pull := n.su(ExitOK, "images.json", "images", "pull", "--to", n.path("sched.yaml"), "--cri-socket", sock)
	got = imagesOf(pull[0]["images"])
	if !strings.Contains(strings.Join(got, "\n"), "registry.k8s.io/kube-scheduler:v1.34.5 present=false rollback=<nil> pulled=true") ||
		!strings.Contains(strings.Join(got, "\n"), st.Images[nodestate.Etcd]+" present=true rollback=<nil> pulled=false") {
		t.Fatalf("images pull:\n%s", strings.Join(got, "\n"))
	}
	plan = n.su(ExitOK, "plan.json", "plan", "--to", n.path("sched.yaml"), "--cri-socket", sock)
	if got := imagesOf(plan[0]["images"]); !strings.HasSuffix(got[0], "v1.34.5 present=true rollback=false pulled=<nil>") {
		t.Fatalf("plan after the pull: %v", got)
	}
}

// images list --to testdata/releases/v1.34.5.yaml on a node made from
// testdata/states/default.yaml prints the release's image of every
// component of the node's roster, one per line, in roster order.
func TestImagesListRelease(t *testing.T) {
	n := newJSONNode(t)
	node, err := nodestate.Load("../../testdata/states/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	node.Etcd.DataDir, node.PKIDir = filepath.Join(n.dir, "etcd"), filepath.Join(n.dir, "pki")
	node.KubeconfigDir, node.ConfigDir = filepath.Join(n.dir, "kube"), filepath.Join(n.dir, "config")
	if err := node.Save(n.path("default.yaml")); err != nil {
		t.Fatal(err)
	}
	n.su(ExitOK, "write.json", "init", "--state", n.path("default.yaml"))
	relPath := "../../testdata/releases/v1.34.5.yaml"
	rel, _, err := engine.LoadRelease(relPath)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, comp := range manifest.NamesFor(node) {
		fmt.Fprintln(&want, rel.Images[comp])
	}
	var stdout, stderr strings.Builder
	code := Main([]string{"images", "list", "--to", relPath, "--manifest-dir", n.manifests, "--state-dir", n.states, "--proc-scope", "self"}, &stdout, &stderr)
	if code != ExitOK || stdout.String() != want.String() {
		t.Fatalf("images list: exit %d\n%s\nwant\n%s\nstderr: %s", code, stdout.String(), want.String(), stderr.String())
	}
	if strings.Count(want.String(), "\n") != 4 {
		t.Fatalf("the default node runs 4 components, the list has:\n%s", want.String())
	}

	// By version, as run --to v1.34.5 moves the node: every Kubernetes
	// component to v1.34.5 in its repository, etcd as kubeadm pairs it.
	stdout.Reset()
	code = Main([]string{"images", "list", "--to", "v1.34.5", "--manifest-dir", n.manifests, "--state-dir", n.states, "--proc-scope", "self"}, &stdout, &stderr)
	got := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if code != ExitOK || len(got) != 4 {
		t.Fatalf("images list --to v1.34.5: exit %d\n%s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	for i, comp := range manifest.NamesFor(node) {
		if comp == nodestate.Etcd {
			if !strings.HasPrefix(got[i], "registry.k8s.io/etcd:") {
				t.Errorf("etcd's image at v1.34.5: %s", got[i])
			}
			continue
		}
		if want := "registry.k8s.io/" + comp + ":v1.34.5"; got[i] != want {
			t.Errorf("%s's image at v1.34.5: %s, want %s", comp, got[i], want)
		}
	}
}

// restart, stop and start take the container-runtime flags of run and
// apply: with --require-cri and no runtime at --cri-socket, a restart is
// refused before anything is written, and stop and start accept them.
func TestImagesFlagsOnRestartStopStart(t *testing.T) {
	n := newJSONNode(t)
	n.su(ExitOK, "write.json", "init", "--state", n.path("state.yaml"))
	// No etcd runs here: the member count a healthy single-member etcd
	// would have given is kept, as the engine keeps it.
	if err := cluster.SaveMembers(filepath.Join(n.states, cluster.MembersFile), cluster.Members{Count: 1, At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	absent := "unix://" + filepath.Join(t.TempDir(), "absent.sock")
	before := dirFiles(t, n.manifests)
	out := n.su(ExitError, "run.json", "restart", "kube-scheduler", "--require-cri", "--cri-socket", absent)
	errLine, _ := out[len(out)-1]["error"].(map[string]any)
	if msg, _ := errLine["message"].(string); !strings.Contains(msg, "no container runtime answers and one is required") {
		t.Fatalf("restart --require-cri without a runtime: %v; want the pre-flight's refusal", out[len(out)-1])
	}
	if after := dirFiles(t, n.manifests); !maps.Equal(before, after) {
		t.Errorf("a refused restart changed the manifest directory")
	}
	n.su(ExitOK, "dry-run.json", "stop", "--dry-run", "kube-scheduler", "--require-cri", "--cri-socket", absent, "--image-pull-timeout", "1m")
	n.su(ExitOK, "dry-run.json", "start", "--dry-run", "--all", "--require-cri", "--cri-socket", absent, "--image-pull-timeout", "1m")
}
