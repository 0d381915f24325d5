package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/adopt"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"sigs.k8s.io/yaml"
)

// TestAdoptKubeadmOnTestBed is issue 15's criterion on the test bed: for
// the real kubeadm's manifests (testdata/kubeadm), running under the
// kubelet stand-in, `init --from-kubeadm --yes` exits 0 and leaves every
// component's process as it was (same pid, same start ticks), `status`
// shows every component rendered, and a later `run --to` a newer patch
// release upgrades the node and commits.
//
// kubeadm's manifests are moved onto the test bed node, and only moved:
// the directories kubeadm's configuration chose (/etc/kubernetes,
// /var/lib/etcd, /srv/...) are prefixed with the node's root, where the
// test bed generated kubeadm's PKI and kubeconfigs; the advertise address
// 10.0.0.11 becomes the loopback address 127.0.0.11 (not 127.0.0.1:
// etcd listens on both); and the etcd and kube-apiserver ports
// become free ones, so the test needs no fixed port but the two kubeadm
// leaves to the components' defaults (kube-controller-manager's 10257 and
// kube-scheduler's 10259 on 127.0.0.1: kubeadm writes no --secure-port,
// and adding one would no longer be kubeadm's pod). The host's CA
// certificate directories stay what they are (the stand-in mounts
// nothing). Every flag, its order, the probes, the volumes and the images
// stay kubeadm's. etcd is the real etcd of the image's minor; the other
// components are the stand-in. That the verbatim manifests, at their own
// paths, keep their UID under the real kubelet's computation is
// TestRealAdoptKeepsKubeletUIDs's (internal/harness/kubeadmgen).
func TestAdoptKubeadmOnTestBed(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up test bed nodes")
	}
	// Beside the other tests: FreePorts never hands out kubeadm's 10257
	// and 10259, which each case binds, holding them (HoldPorts) against
	// any other test process that runs this one.
	t.Parallel()
	repo, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, version := range []string{"v1.36.3", "v1.37.2"} {
		for _, config := range []string{"defaults", "extra-args", "custom-paths", "joined"} {
			t.Run(version+"/"+config, func(t *testing.T) {
				if config == "joined" {
					// The node joined a three-member etcd cluster
					// (--initial-cluster-state=existing, two peers at
					// 10.0.0.12 and .13): its etcd cannot start on a
					// single-node test bed. That adopting it keeps every
					// pod is TestRealAdoptKeepsKubeletUIDs's and
					// adopt.TestKubeadmFixturesAdoptWithoutRestart's.
					t.Skip("a member of a three-node etcd cluster: no single-node test bed runs it")
				}
				adoptOnTestBed(t, filepath.Join(repo, "testdata", "kubeadm", version, config), version, "")
			})
		}
	}
}

// TestAdoptKubeadmUpgradesToNextMinorOnTestBed: each kubeadm configuration
// of v1.35 adopted on the test bed with every component kept running
// (init --from-kubeadm --yes), then upgraded by version to the next minor,
// v1.36.3 (`run --to v1.36.3`, the release kubeadm's etcd pairing makes),
// commits, every component replaced. v1.35 -> v1.36 has no
// EtcdMinimumPatch refusal; the other minors' adoption is
// TestAdoptKubeadmOnTestBed's, their next minor's render
// adopt.TestAdoptedFixturesUpgradeToNextMinor's.
func TestAdoptKubeadmUpgradesToNextMinorOnTestBed(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up test bed nodes")
	}
	t.Parallel()
	repo, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, config := range []string{"defaults", "extra-args", "custom-paths"} {
		// "joined": a member of a three-node etcd cluster, as above.
		t.Run("v1.35.4/"+config, func(t *testing.T) {
			adoptOnTestBed(t, filepath.Join(repo, "testdata", "kubeadm", "v1.35.4", config), "v1.35.4", "v1.36.3")
		})
	}
}

// adoptOnTestBed brings kubeadm's manifests of fixture (made by kubeadm
// version) up on a test bed node, adopts them with every component kept
// running, then upgrades: to the next patch through a release file when
// to is "", else by version (run --to to).
func adoptOnTestBed(t *testing.T, fixture, version, to string) {
	testbed.HoldPorts(t, 5*time.Minute, 10257, 10259)
	// What kubeadm's manifests say where they are: their directories and
	// ports (Derive reads no file).
	src, err := adopt.ReadKubeadm(filepath.Join(fixture, "manifests"), "")
	if err != nil {
		t.Fatal(err)
	}
	orig, _, err := adopt.Derive(src)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "node")
	const advertise = "127.0.0.11"
	var ports nodestate.Ports
	n := testbed.Start(t, testbed.Options{
		Root:        root,
		NoManifests: true,
		Mutate: func(st *nodestate.NodeState) {
			// The PKI and kubeconfigs where kubeadm's manifests, moved
			// into the root, read them.
			st.NodeName, st.Etcd.MemberName = orig.NodeName, orig.Etcd.MemberName
			st.AdvertiseAddress = advertise // in the certificates
			st.PKIDir = root + orig.PKIDir
			st.KubeconfigDir = root + orig.KubeconfigDir
			st.Etcd.DataDir = root + orig.Etcd.DataDir
			ports = st.Ports // free ones
		},
	})
	images := kubeletsim.ImageMap{}
	for comp, ref := range orig.Images {
		if comp == nodestate.Etcd {
			minor := strings.Join(strings.SplitN(strings.TrimPrefix(ref[strings.LastIndex(ref, ":")+1:], "v"), ".", 3)[:2], ".")
			bin, err := etcdbuild.Binary(minor)
			if err != nil {
				t.Fatal(err)
			}
			images[ref] = kubeletsim.Image{Binary: bin}
			continue
		}
		// The stand-in, not the real binary the test bed maps a built
		// version's images to.
		images[ref] = kubeletsim.Image{Binary: n.StandinBinary(comp), Env: map[string]string{standin.EnvEvents: n.EventsFile}}
	}
	next := nextPatch(t, version)
	upImages := map[string]string{}
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		upImages[comp] = testbed.Repos[comp] + ":" + next
	}
	if to != "" {
		next = to
		rel, err := engine.ReleaseForVersion(orig, to)
		if err != nil {
			t.Fatal(err)
		}
		upImages = rel.Images
	}
	for comp, ref := range upImages {
		if comp == nodestate.Etcd {
			minor := strings.Join(strings.SplitN(strings.TrimPrefix(ref[strings.LastIndex(ref, ":")+1:], "v"), ".", 3)[:2], ".")
			bin, err := etcdbuild.Binary(minor)
			if err != nil {
				t.Fatal(err)
			}
			images[ref] = kubeletsim.Image{Binary: bin}
			continue
		}
		images[ref] = kubeletsim.Image{Binary: n.StandinBinary(comp), Env: map[string]string{standin.EnvEvents: n.EventsFile}}
	}
	for ref, img := range images {
		if err := n.MapImage(ref, img); err != nil {
			t.Fatal(err)
		}
	}

	// kubeadm's manifests, moved into the node, and the kubelet stand-in
	// starting them.
	move := moveKubeadm(root, advertise, orig, ports)
	for _, f := range kubeadmFiles {
		b, err := os.ReadFile(filepath.Join(fixture, "manifests", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.ManifestDir, f), []byte(move(string(b))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	moved, err := adopt.ReadKubeadm(n.ManifestDir, "")
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := adopt.Derive(moved)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ports.APIServer != ports.APIServer || st.Ports.EtcdClient != ports.EtcdClient || st.PKIDir != root+orig.PKIDir {
		t.Fatalf("the moved manifests run on ports %+v, PKI %s: want the free ports %+v and %s", st.Ports, st.PKIDir, ports, root+orig.PKIDir)
	}
	n.State = st // what WaitActive and the status rows go by
	if err := n.WaitActive(t.Context(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	before := processes(t, n)

	c := &cliNode{t: t, node: n, stateDir: filepath.Join(root, "stratum"), metrics: filepath.Join(root, "stratum-upgrade.prom")}
	args := []string{"init", "--from-kubeadm", "--yes"}
	if b, err := os.ReadFile(filepath.Join(fixture, "kubeadm.yaml")); err == nil {
		// kubeadm's configuration, moved as its manifests were, so the
		// cross-check agrees.
		cfg := filepath.Join(root, "kubeadm.yaml")
		if err := os.WriteFile(cfg, []byte(pinMoved(t, move(string(b)), root, orig, ports)), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--kubeadm-config="+cfg)
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := c.want(cli.ExitOK, args...)
	if strings.Contains(out, "note: ") {
		t.Errorf("kubeadm's configuration disagrees with its manifests:\n%s", out)
	}
	contains(t, "init output", out, "kube-apiserver           kept running: kubelet sees the same pod in the render")
	if strings.Contains(out, "WOULD RESTART") {
		t.Errorf("init --from-kubeadm would restart a component:\n%s", out)
	}
	// Past a relist of the stand-in (1 s): kubelet has read the rewritten
	// files and, seeing the same pods, left their containers alone.
	time.Sleep(2 * time.Second)
	after := processes(t, n)
	for comp, p := range before {
		if after[comp] != p {
			t.Errorf("%s: process %v before the adoption, %v after: restarted", comp, p, after[comp])
		}
	}
	status := c.want(cli.ExitOK, "status")
	for _, comp := range manifest.NamesFor(st) {
		row := statusRow(status, comp)
		if len(row) < 5 || row[2] != "rendered" || row[3] != "yes" ||
			row[4] != fmt.Sprintf("%d/%d", before[comp].PID, before[comp].StartTicks) {
			t.Errorf("status row of %s %q: want rendered, active, pid/ticks %d/%d\n%s", comp, row, before[comp].PID, before[comp].StartTicks, status)
		}
	}

	// A later run upgrades it.
	target := next
	if to == "" {
		target = filepath.Join(root, "next.yaml")
		doc := fmt.Sprintf("apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: %s\nimages:\n", next)
		for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
			doc += fmt.Sprintf("  %s: %s\n", comp, upImages[comp])
		}
		if err := os.WriteFile(target, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out = c.want(cli.ExitOK, "run", "--to="+target)
	contains(t, "run output", out, "committed: node state is now "+next)
	contains(t, "manifest", readFile(t, filepath.Join(n.ManifestDir, "kube-scheduler.yaml")), "image: registry.k8s.io/kube-scheduler:"+next+"\n")
	upgraded := processes(t, n)
	for comp, p := range before {
		// etcd is replaced only when the upgrade changes its image.
		etcdChanges := upImages[nodestate.Etcd] != "" && upImages[nodestate.Etcd] != orig.Images[nodestate.Etcd]
		want := comp != nodestate.Etcd || etcdChanges
		if replaced := upgraded[comp] != p; replaced != want {
			t.Errorf("%s after the run: process %v, before %v: replaced %v, want %v", comp, upgraded[comp], p, replaced, want)
		}
	}
}

// kubeadmFiles are the manifests kubeadm writes.
var kubeadmFiles = []string{"etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"}

// moveKubeadm is the rewrite of a kubeadm manifest onto the test bed node
// at root: the directories of st (kubeadm's, as derived) prefixed with
// root, the advertise address made advertise, and etcd's and
// kube-apiserver's ports made the free ones of ports.
func moveKubeadm(root, advertise string, st *nodestate.NodeState, ports nodestate.Ports) func(string) string {
	var pairs []string
	for _, d := range []string{st.PKIDir, st.KubeconfigDir, st.Etcd.DataDir} {
		pairs = append(pairs, "="+d, "="+root+d, ": "+d, ": "+root+d)
	}
	pairs = append(pairs, st.AdvertiseAddress, advertise)
	dirs := strings.NewReplacer(pairs...)
	portMap := map[string]int{
		strconv.Itoa(st.Ports.APIServer):   ports.APIServer,
		strconv.Itoa(st.Ports.EtcdClient):  ports.EtcdClient,
		strconv.Itoa(st.Ports.EtcdPeer):    ports.EtcdPeer,
		strconv.Itoa(st.Ports.EtcdMetrics): ports.EtcdMetrics,
	}
	// A port: after ":" in a URL or host:port, after "=" of --secure-port,
	// or a containerPort; never a digit run inside a longer number.
	port := regexp.MustCompile(`(:|--secure-port=|containerPort: )(\d+)\b`)
	return func(s string) string {
		s = dirs.Replace(s)
		return port.ReplaceAllStringFunc(s, func(m string) string {
			sub := port.FindStringSubmatch(m)
			if p, ok := portMap[sub[2]]; ok {
				return sub[1] + strconv.Itoa(p)
			}
			return m
		})
	}
}

// pinMoved writes into a kubeadm configuration the fields the test bed moved
// that it leaves to kubeadm's defaults (certificatesDir, etcd's dataDir,
// the API server's bindPort): the cross-check compares the manifests with
// kubeadm's defaults where a field is unset, and the moved node no longer
// runs them. A path the configuration sets was moved by move already; a
// bindPort was not (move rewrites ports in URLs and flags only).
func pinMoved(t *testing.T, cfg, root string, orig *nodestate.NodeState, ports nodestate.Ports) string {
	t.Helper()
	var docs []string
	for _, doc := range strings.Split(cfg, "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("kubeadm configuration: %v", err)
		}
		sub := func(parent map[string]any, key string) map[string]any {
			if c, ok := parent[key].(map[string]any); ok {
				return c
			}
			c := map[string]any{}
			parent[key] = c
			return c
		}
		setDefault := func(parent map[string]any, key string, v any) {
			if _, ok := parent[key]; !ok {
				parent[key] = v
			}
		}
		switch m["kind"] {
		case "InitConfiguration", "JoinConfiguration":
			sub(m, "localAPIEndpoint")["bindPort"] = ports.APIServer // set or not, move leaves it
		case "ClusterConfiguration":
			setDefault(m, "certificatesDir", root+orig.PKIDir)
			setDefault(sub(sub(m, "etcd"), "local"), "dataDir", root+orig.Etcd.DataDir)
		}
		b, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	return strings.Join(docs, "---\n")
}

// processes is every component's one process on the node, by component.
func processes(t *testing.T, n *testbed.Node) map[string]proc.Process {
	t.Helper()
	out := map[string]proc.Process{}
	for _, comp := range manifest.NamesFor(n.State) {
		target, err := n.Target(comp)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := n.Scanner.PIDs(target.Binary)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 1 {
			t.Fatalf("%s: processes %v, want one", comp, ps)
		}
		out[comp] = ps[0]
	}
	return out
}

// statusRow is the fields of status's row for component, nil without one.
func statusRow(status, component string) []string {
	for _, line := range strings.Split(status, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == component {
			return f
		}
	}
	return nil
}

// nextPatch is version's next patch release: v1.36.3 -> v1.36.4.
func nextPatch(t *testing.T, version string) string {
	t.Helper()
	i := strings.LastIndex(version, ".")
	p, err := strconv.Atoi(version[i+1:])
	if err != nil {
		t.Fatalf("version %s: %v", version, err)
	}
	return version[:i+1] + strconv.Itoa(p+1)
}
