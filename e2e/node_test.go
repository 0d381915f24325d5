package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/converge"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/runbin"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/resolve"
)

// node is a control-plane node on the Host's kubelet, driven by the real
// stratum-upgrade binary.
type node struct {
	h         *Host
	dir       string // the node's files: state, PKI, etcd data
	stateFile string
	stateDir  string
	st        *nodestate.NodeState
}

// componentNames are the process names of the components (kube-vip has no
// VIP here, so no such pod).
var componentNames = []string{nodestate.Etcd, nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}

// nodeSpec is what resetNodeFrom makes a node from.
type nodeSpec struct {
	// stateFile is the node state, relative to the repository root
	// (default testdata/states/default.yaml: etcd 3.5 and the stand-ins
	// at v1.34.4).
	stateFile string
	// real is a node of the real control plane (testdata/states/real.yaml
	// and RealBinaries' images): kube-apiserver gets
	// --endpoint-reconciler-type=none, as testbed.Options.Real does, since
	// v1.37 refuses to reconcile the loopback advertise address.
	real bool
	// mutate edits the state before it is saved and imported.
	mutate func(*nodestate.NodeState)
}

// resetNode is resetNodeFrom the default state: etcd 3.5 and the
// stand-ins at v1.34.4.
func resetNode(t *testing.T, h *Host) *node {
	t.Helper()
	return resetNodeFrom(t, h, nodeSpec{})
}

// resetNodeFrom removes every manifest, waits until kubelet has stopped
// every pod, and makes a fresh node from spec: single-member, on free
// loopback ports, kubeadm's PKI (testbed.GeneratePKI) and kubeconfigs with
// client certificates (testbed.WriteKubeconfigs), imported with
// `stratum-upgrade init`, every component active.
func resetNodeFrom(t *testing.T, h *Host, spec nodeSpec) *node {
	t.Helper()
	ctx := t.Context()
	ents, _ := os.ReadDir(h.ManifestDir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(h.ManifestDir, e.Name()))
	}
	if err := waitUntil(ctx, "every container process gone after the manifests were removed", 90*time.Second, func() (bool, error) {
		ps, err := h.ContainerProcesses()
		return err == nil && len(ps) == 0, err
	}); err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		// kubelet holds a new static pod whose name an older pod still
		// has (pod workers) until housekeeping, every 2 s, forgets the
		// terminated one; a pod written before then waits 10-15 s.
		time.Sleep(4 * time.Second)
	}
	n := &node{h: h, dir: filepath.Join(h.Root, "node")}
	if err := os.RemoveAll(n.dir); err != nil {
		t.Fatal(err)
	}
	n.stateFile = filepath.Join(n.dir, "state.yaml")
	n.stateDir = filepath.Join(n.dir, "var/lib/stratum")
	repo, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if spec.stateFile == "" {
		spec.stateFile = "testdata/states/default.yaml"
	}
	st, err := nodestate.Load(filepath.Join(repo, spec.stateFile))
	if err != nil {
		t.Fatal(err)
	}
	st.NodeName = h.NodeName
	st.Etcd.MemberName = h.NodeName
	st.AdvertiseAddress = "127.0.0.1"
	st.PKIDir = filepath.Join(n.dir, "etc/kubernetes/pki")
	st.KubeconfigDir = filepath.Join(n.dir, "etc/kubernetes")
	st.ConfigDir = filepath.Join(n.dir, "etc/kubernetes/stratum")
	st.Etcd.DataDir = filepath.Join(n.dir, "var/lib/etcd")
	st.VIP = nil
	ports, err := testbed.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	st.Ports = nodestate.Ports{EtcdClient: ports[0], EtcdPeer: ports[1], EtcdMetrics: ports[2], APIServer: ports[3], ControllerManager: ports[4], Scheduler: ports[5]}
	st.Etcd.InitialCluster = st.Etcd.MemberName + "=https://" + net.JoinHostPort(st.AdvertiseAddress, strconv.Itoa(st.Ports.EtcdPeer))
	st.Etcd.InitialClusterState = "new"
	if spec.real {
		st.SetExtraArg(nodestate.KubeAPIServer, "endpoint-reconciler-type", "none")
	}
	if spec.mutate != nil {
		spec.mutate(st)
	}
	for _, d := range []string{st.KubeconfigDir, st.ConfigDir, filepath.Dir(st.Etcd.DataDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := testbed.GeneratePKI(st.PKIDir, st.NodeName, st.AdvertiseAddress); err != nil {
		t.Fatal(err)
	}
	if err := testbed.WriteKubeconfigs(st); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(n.stateFile); err != nil {
		t.Fatal(err)
	}
	n.st = st
	waitQuiet(t, h)
	start := time.Now()
	if r := n.run(t, runOpts{}, "init", "--state", n.stateFile); r.code != 0 {
		t.Fatalf("init exited %d:\n%s", r.code, r.output())
	}
	for _, comp := range manifest.NamesFor(st) {
		tg, err := manifest.Target(st, comp)
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Host().WaitActive(ctx, tg, 2*time.Minute); err != nil {
			t.Fatalf("after init: %v\nkubelet log:\n%s", err, tailFile(h.KubeletLog, 40))
		}
	}
	t.Logf("node initialised and every component active in %s", time.Since(start).Round(time.Millisecond))
	return n
}

// writeRelease writes a release moving the stand-ins to v1.34.5 (fail's
// component in mode), etcd to 3.6.16 when etcd36, and returns its path.
func (n *node) writeRelease(t *testing.T, name string, etcd36 bool, fail string, mode standin.Mode) string {
	t.Helper()
	r := engine.Release{APIVersion: engine.ReleaseAPIVersion, Kind: engine.ReleaseKind, KubernetesVersion: "v1.34.5", Images: map[string]string{}}
	for _, comp := range StandinComponents {
		r.Images[comp] = testbed.ModeImage(comp, "v1.34.5", "")
		if comp == fail {
			r.Images[comp] = testbed.ModeImage(comp, "v1.34.5", mode)
		}
	}
	if etcd36 {
		r.Images[nodestate.Etcd] = etcdbuild.Builds[1].Image
	}
	// The control plane's version is kube-apiserver's, a stand-in mode's
	// pre-release tag included (v1.34.5-unhealthy).
	r.KubernetesVersion = resolve.ImageTag(r.Images[nodestate.KubeAPIServer])
	return n.saveRelease(t, name, r)
}

// saveRelease writes r into the node's directory and returns its path.
func (n *node) saveRelease(t *testing.T, name string, r engine.Release) string {
	t.Helper()
	b, err := yaml.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(n.dir, name+".yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// manifests returns the bytes of every entry of the manifest directory,
// hidden ones included.
func (n *node) manifests(t *testing.T) map[string][]byte {
	t.Helper()
	return converge.Manifests(t, n.h.ManifestDir)
}

// runOpts are the per-invocation settings of stratum-upgrade.
type runOpts struct {
	fault string
	// flags are extra global flags (deadlines).
	flags []string
	// onEvent runs on every engine event as it is printed.
	onEvent func(engine.Event)
}

// runResult is one stratum-upgrade invocation.
type runResult struct {
	code    int // -1: killed by a signal
	events  []engine.Event
	final   map[string]any
	stdout  string
	stderr  string
	elapsed time.Duration
	foreign []string // component processes of other tests seen while it ran
}

func (r runResult) output() string {
	if len(r.foreign) > 0 {
		return fmt.Sprintf("INTERFERENCE: another test's component processes %v ran meanwhile and the scan is host-wide: this result is not trustworthy; rerun on a quiet machine (or with %s=1)\n", r.foreign, EnvScope) +
			"stdout:\n" + runbin.LastLines(r.stdout, 30) + "\nstderr:\n" + runbin.LastLines(r.stderr, 30)
	}
	return "stdout:\n" + runbin.LastLines(r.stdout, 30) + "\nstderr:\n" + runbin.LastLines(r.stderr, 30)
}

// run runs the real binary against the Host's static pod directory with a
// host-wide process scan (no --proc-scope) and JSON output, to its end.
func (n *node) run(t *testing.T, o runOpts, args ...string) runResult {
	t.Helper()
	argv := append(append([]string{}, args...), "--manifest-dir", n.h.ManifestDir, "--state-dir", n.stateDir, "--output", "json", "--log-level", "info")
	argv = append(argv, o.flags...)
	if scoped() {
		argv = append(argv, "--proc-scope", strconv.Itoa(os.Getpid()))
	}
	cmd := runbin.Command(runbin.Stratum(t), o.fault, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var r runResult
	stopWatch := func() {}
	if !scoped() {
		stopWatch = watchForeign(n.h, &r.foreign)
	}
	var stdout strings.Builder
	sc := bufio.NewScanner(pipe)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		stdout.Write(line)
		stdout.WriteByte('\n')
		var probe map[string]any
		if json.Unmarshal(line, &probe) != nil {
			continue
		}
		if _, ok := probe["result"]; ok {
			r.final = probe
			continue
		}
		if _, ok := probe["step"]; ok {
			var ev engine.Event
			if json.Unmarshal(line, &ev) == nil {
				r.events = append(r.events, ev)
				if o.onEvent != nil {
					o.onEvent(ev)
				}
			}
		}
	}
	werr := cmd.Wait()
	stopWatch()
	r.elapsed = time.Since(start)
	r.stdout, r.stderr = stdout.String(), stderr.String()
	if r.code, err = runbin.ExitCode(werr); err != nil {
		t.Fatalf("stratum-upgrade %s (fault %q): %v\n%s", args[0], o.fault, err, r.output())
	}
	t.Logf("stratum-upgrade %s (fault %q): exit %d in %s", args[0], o.fault, r.code, r.elapsed.Round(time.Millisecond))
	if len(r.foreign) > 0 {
		t.Logf("INTERFERENCE: component processes of another test ran during this invocation: %v", r.foreign)
	}
	return r
}

// foreignComponents lists processes named like a component that do not
// run in this Host's containers: another test's, which a host-wide scan
// would count.
func foreignComponents(h *Host) []string {
	var out []string
	for _, name := range componentNames {
		all, err := proc.Host().PIDs(name)
		if err != nil {
			continue
		}
		ours, err := h.ComponentPIDs(name)
		if err != nil {
			continue
		}
		mine := map[int]bool{}
		for _, p := range ours {
			mine[p.PID] = true
		}
		for _, p := range all {
			if !mine[p.PID] {
				out = append(out, fmt.Sprintf("%s[%d]", name, p.PID))
			}
		}
	}
	return out
}

// watchForeign samples foreignComponents every 500 ms into *seen until the
// returned func is called.
func watchForeign(h *Host, seen *[]string) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var mu sync.Mutex
	got := map[string]bool{}
	go func() {
		defer wg.Done()
		for {
			for _, f := range foreignComponents(h) {
				mu.Lock()
				if !got[f] {
					got[f] = true
					*seen = append(*seen, f)
				}
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// waitQuiet waits until no other test's component process runs on the
// machine (at most STRATUM_E2E_QUIET, default 10m): a host-wide scan would
// count them. CI runs alone, so this returns at once there.
func waitQuiet(t *testing.T, h *Host) {
	t.Helper()
	if scoped() {
		return
	}
	limit := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("STRATUM_E2E_QUIET")); err == nil {
		limit = d
	}
	start := time.Now()
	logged := false
	for {
		f := foreignComponents(h)
		if len(f) == 0 {
			if logged {
				t.Logf("quiet after %s", time.Since(start).Round(time.Second))
			}
			return
		}
		if time.Since(start) > limit {
			t.Fatalf("other tests' component processes %v ran for %s: a host-wide scan would count them; rerun when the machine is quiet", f, limit)
		}
		if !logged {
			t.Logf("waiting for other tests' component processes to go: %v", f)
			logged = true
		}
		time.Sleep(2 * time.Second)
	}
}

// EnvScope, set to 1, is the development mode for a machine where other
// tests run component processes: the test process becomes a child
// subreaper, so containerd's shims (which daemonize) and every container
// process descend from it, and stratum-upgrade gets --proc-scope with the
// test's PID. Off by default, and in CI: there the scan is host-wide, as
// on a node.
const EnvScope = "STRATUM_E2E_SCOPE"

func scoped() bool { return os.Getenv(EnvScope) == "1" }

// becomeSubreaper makes this process the reaper of its orphaned
// descendants (prctl PR_SET_CHILD_SUBREAPER).
func becomeSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}
