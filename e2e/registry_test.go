package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/ciq/stratum-upgrade/cri"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// TestRegistryImages is docs/e2e.md's registry scenarios: the stand-in
// images only in a distribution registry on loopback (pushed there, never
// imported into containerd), the node's images pulled through containerd's
// CRI by the engine's ImagePull pre-flight before anything stops.
func TestRegistryImages(t *testing.T) {
	requireE2E(t)
	ks, _, err := kubeletsFor()
	if err != nil {
		t.Fatal(err)
	}
	k := ks[0] // the run's newest kubelet: the pulls are the engine's, through containerd
	h := startHost(t, k)
	ctx := t.Context()
	bins, err := BuildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	imgs := RegistryImageSet(bins, "v1.34.4", "v1.34.5")
	start := time.Now()
	reg, err := h.StartRegistry(ctx, imgs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop) // before the Host's teardown: it names the Host's root
	for _, img := range imgs {
		if err := reg.Push(ctx, img.Tags[0], ""); err != nil {
			t.Fatal(err)
		}
	}
	// A tag only the registry-down case pulls (it never gets the chance).
	if err := reg.Push(ctx, RegistryImage(nodestate.Scheduler, "v1.34.5"), "v1.34.5-unpulled"); err != nil {
		t.Fatal(err)
	}
	t.Logf("registry %s up, %d images pushed, in %s", reg.Addr, len(imgs)+1, time.Since(start).Round(time.Millisecond))

	all := &report{Kubelets: []string{k.Version}, Deadlines: fmt.Sprintf("%+v", engine.DefaultDeadlines)}
	t.Cleanup(func() { all.writeTo(t, "registry-report.json") })
	rep := &kubeletRuns{rep: all, kubelet: k.Version}
	sock := "unix://" + h.ContainerdSock
	runtimeFlags := runOpts{flags: []string{"--cri-socket", sock}}
	// The node runs the registry's v1.34.4 images (kubelet pulls them at
	// init); etcd is the imported one and does not change.
	spec := nodeSpec{mutate: func(st *nodestate.NodeState) {
		for _, comp := range StandinComponents {
			st.Images[comp] = RegistryImage(comp, "v1.34.4")
		}
	}}
	release := func(n *node, name string, tags map[string]string) string {
		// The release's version is kube-apiserver's, as the release check
		// wants it.
		version := "v1.34.5"
		if t, ok := tags[nodestate.KubeAPIServer]; ok {
			version = t
		}
		r := engine.Release{APIVersion: engine.ReleaseAPIVersion, Kind: engine.ReleaseKind, KubernetesVersion: version, Images: map[string]string{}}
		for _, comp := range StandinComponents {
			tag := "v1.34.5"
			if t, ok := tags[comp]; ok {
				tag = t
			}
			r.Images[comp] = RegistryImage(comp, tag)
		}
		return n.saveRelease(t, name, r)
	}

	t.Run("new-images-pulled-before-the-first-stop", func(t *testing.T) {
		n := resetNodeFrom(t, h, spec)
		rel := release(n, "v1.34.5-registry", nil)
		listed := listImages(t, n, rel)
		presentBefore := presentImages(t, sock, listed)
		// No --cri-socket: the runtime is the one the running kubelet's
		// --config names (the Host's kubelet is the only one this run
		// sees: STRATUM_E2E_NS=1, or CI's machine to itself).
		r := n.run(t, runOpts{}, "run", "--to", rel)
		if !strings.Contains(r.stderr, `"endpoint":"`+sock+`","from":"the running kubelet's --config`) {
			t.Errorf("the runtime was not found through the running kubelet's --config:\n%s", r.output())
		}
		rep.add(t, "upgrade of the 3 stand-ins to images only in the registry: pulled in pre-flight", r)
		if r.code != 0 {
			t.Fatalf("run exited %d, want 0:\n%s", r.code, r.output())
		}
		pulled := pulledBeforeStop(t, r)
		want := slices.DeleteFunc(slices.Clone(listed), func(ref string) bool { return presentBefore[ref] })
		slices.Sort(want)
		if !slices.Equal(pulled, want) || len(pulled) != len(StandinComponents) {
			t.Fatalf("pulled %v; want exactly the listed images that were not present: %v (listed %v)", pulled, want, listed)
		}
		for ref, ok := range presentImages(t, sock, listed) {
			if !ok {
				t.Errorf("%s, listed by images list, is not in containerd after the upgrade", ref)
			}
		}
		checkConverged(t, n, engine.Committed, nil)
	})

	t.Run("images-present-then-rollback-last-pulls-the-old-ones", func(t *testing.T) {
		n := resetNodeFrom(t, h, spec)
		rel := release(n, "v1.34.5-registry", nil)
		r := n.run(t, runtimeFlags, "run", "--to", rel)
		rep.add(t, "the same upgrade, every image present: no pull", r)
		if r.code != 0 {
			t.Fatalf("run exited %d, want 0:\n%s", r.code, r.output())
		}
		if p := pulledBeforeStop(t, r); len(p) != 0 {
			t.Fatalf("pulled %v with every image present", p)
		}
		// As kubelet's image garbage collection would, once they are unused.
		var old []string
		for _, comp := range StandinComponents {
			old = append(old, RegistryImage(comp, "v1.34.4"))
		}
		removeImages(t, sock, old)
		r = n.run(t, runtimeFlags, "rollback", "--last")
		rep.add(t, "rollback --last with the old images removed: pulled in pre-flight", r)
		if r.code != 0 {
			t.Fatalf("rollback --last exited %d, want 0:\n%s", r.code, r.output())
		}
		slices.Sort(old)
		if p := pulledBeforeStop(t, r); !slices.Equal(p, old) {
			t.Fatalf("rollback --last pulled %v, want the old images %v", p, old)
		}
		checkConverged(t, n, engine.Committed, nil)
	})

	t.Run("missing-tag-and-registry-down-refused-in-pre-flight", func(t *testing.T) {
		n := resetNodeFrom(t, h, spec)
		cases := []struct {
			name, what, image, reason string
			tags                      map[string]string
			before                    func()
		}{
			{name: "missing-tag", what: "a kube-apiserver tag the registry lacks", image: RegistryImage(nodestate.KubeAPIServer, "v1.34.6"), reason: "not found",
				tags: map[string]string{nodestate.KubeAPIServer: "v1.34.6"}},
			{name: "registry-down", what: "the registry stopped before the pull", image: RegistryImage(nodestate.Scheduler, "v1.34.5-unpulled"), reason: "connection refused",
				tags: map[string]string{nodestate.Scheduler: "v1.34.5-unpulled"}, before: reg.Stop},
		}
		for _, c := range cases {
			if c.before != nil {
				c.before()
			}
			rel := release(n, c.name, c.tags)
			manifests := n.manifests(t)
			pids := componentProcesses(t, h)
			r := n.run(t, runtimeFlags, "run", "--to", rel)
			rep.add(t, c.what+": refused in pre-flight", r)
			out := r.stdout + r.stderr
			if r.code != 1 || !strings.Contains(out, "ImagePull") || !strings.Contains(out, c.image) || !strings.Contains(out, c.reason) || !strings.Contains(out, "nothing was written") {
				t.Fatalf("%s: exit %d; want 1, the ImagePull check naming %s and the runtime's %q:\n%s", c.name, r.code, c.image, c.reason, r.output())
			}
			t.Logf("%s: %s", c.name, strings.TrimSpace(r.stderr))
			for _, ev := range r.events {
				if ev.Txn != "" || ev.Step == "stop" || ev.Step == "write" {
					t.Fatalf("%s: a refused run went on to %s (txn %q)", c.name, ev.Step, ev.Txn)
				}
			}
			if after := componentProcesses(t, h); !maps.EqualFunc(pids, after, slices.Equal) {
				t.Fatalf("%s: component processes changed: before %v, after %v", c.name, pids, after)
			}
			if !maps.EqualFunc(manifests, n.manifests(t), func(a, b []byte) bool { return string(a) == string(b) }) {
				t.Fatalf("%s: the manifest directory changed", c.name)
			}
			t.Logf("%s: refused, every component's pid and start time unchanged: %v", c.name, pids)
		}
	})
}

// listImages is `images list --to rel` on n.
func listImages(t *testing.T, n *node, rel string) []string {
	t.Helper()
	r := n.run(t, runOpts{}, "images", "list", "--to", rel)
	if r.code != 0 {
		t.Fatalf("images list exited %d:\n%s", r.code, r.output())
	}
	var out struct {
		Images []struct {
			Image string `json:"image"`
		} `json:"images"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &out); err != nil {
		t.Fatalf("images list output: %v\n%s", err, r.stdout)
	}
	var refs []string
	for _, i := range out.Images {
		refs = append(refs, i.Image)
	}
	return refs
}

// presentImages asks containerd over CRI (cri.Client) which of refs it has.
func presentImages(t *testing.T, sock string, refs []string) map[string]bool {
	t.Helper()
	c, err := cri.Dial(cri.Source{Endpoint: sock, From: "the e2e host"}, cri.DialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, ref := range refs {
		img, err := c.Status(t.Context(), ref)
		if err != nil {
			t.Fatal(err)
		}
		out[ref] = img.Present
	}
	return out
}

// removeImages removes refs from containerd through CRI's RemoveImage,
// as kubelet's image garbage collection does.
func removeImages(t *testing.T, sock string, refs []string) {
	t.Helper()
	svc, err := criclient.NewRemoteImageService(sock, cri.DialTimeout, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if err := svc.RemoveImage(t.Context(), &runtimeapi.ImageSpec{Image: ref}); err != nil {
			t.Fatalf("remove %s: %v", ref, err)
		}
	}
	for ref, ok := range presentImages(t, sock, refs) {
		if ok {
			t.Fatalf("%s still present after RemoveImage", ref)
		}
	}
}

// pulledBeforeStop is the images r's image-pulled events name, sorted;
// it fails t when one came after the first stop or write.
func pulledBeforeStop(t *testing.T, r runResult) []string {
	t.Helper()
	var pulled []string
	first := slices.IndexFunc(r.events, func(ev engine.Event) bool { return ev.Step == "stop" || ev.Step == "write" })
	for i, ev := range r.events {
		if ev.Step != "image-pulled" {
			continue
		}
		if first >= 0 && i > first {
			t.Errorf("image pulled after the first stop: %s", ev.Message)
		}
		f := strings.Fields(ev.Message) // "image REF pulled (SIZE in D) for ..."
		if len(f) < 2 {
			t.Fatalf("image-pulled event %q", ev.Message)
		}
		pulled = append(pulled, f[1])
		t.Logf("%s", ev.Message)
	}
	slices.Sort(pulled)
	return pulled
}

// componentProcesses is every component's processes in the Host's
// containers, by pid and start time.
func componentProcesses(t *testing.T, h *Host) map[string][]proc.Process {
	t.Helper()
	out := map[string][]proc.Process{}
	for _, name := range componentNames {
		ps, err := h.ComponentPIDs(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = ps
	}
	return out
}

// writeTo saves the report as JSON under <cache>/e2e/name.
func (rep *report) writeTo(t *testing.T, name string) {
	cache, err := CacheDir()
	if err != nil {
		t.Log(err)
		return
	}
	path := filepath.Join(cache, "e2e", name)
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Logf("report: %v", err)
		return
	}
	t.Logf("measurements written to %s", path)
}
