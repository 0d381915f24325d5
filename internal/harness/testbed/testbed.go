// Package testbed brings up a control-plane node for tests and the demo:
// the kubelet stand-in (internal/harness/kubeletsim) as a subprocess watching a
// manifest directory in a private root, real etcd (internal/harness/etcdbuild) and
// the component stand-ins (internal/harness/standin) mapped to the node state's
// images, kubeadm's PKI generated for real, and the manifests rendered by
// package manifest. Start waits until every component is active and
// registers a teardown that leaves no process behind even when the test
// fails.
//
// Everything lives under the node's root directory; every port is a free
// loopback port; the VIP, if any, is a loopback address kube-vip's stand-in
// never touches. Every process the node runs carries the environment
// variable MarkerEnv=<root>, which is how teardown finds and kills
// anything that escaped the stand-in.
package testbed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// MarkerEnv is set to the node's root in the environment of the kubelet
// stand-in and of every container it runs.
const MarkerEnv = "STRATUM_TESTBED"

// VIPAddress is the VIP a node with one is given: loopback, never bound.
const VIPAddress = "127.0.0.2"

// Kubernetes and kube-vip image tags mapped to the component stand-in on
// every node, so a release moving between them finds its images.
var (
	KubeTags    = []string{"v1.34.4", "v1.34.5"}
	KubeVIPTags = []string{"v0.8.9", "v0.9.2"}
)

// Image repositories of the components, as the node states spell them.
var Repos = map[string]string{
	nodestate.KubeAPIServer:     "registry.k8s.io/kube-apiserver",
	nodestate.ControllerManager: "registry.k8s.io/kube-controller-manager",
	nodestate.Scheduler:         "registry.k8s.io/kube-scheduler",
	nodestate.KubeVIP:           "ghcr.io/kube-vip/kube-vip",
}

// ModeImage is the image reference that runs component's stand-in in mode:
// the component's repository at tag with "-<mode>" appended
// ("registry.k8s.io/kube-scheduler:v1.34.5-exit-at-start"). Every node maps
// it for every tag in KubeTags/KubeVIPTags and every standin.Modes; the
// plain tag runs ModeHealthy.
func ModeImage(component, tag string, mode standin.Mode) string {
	ref := Repos[component] + ":" + tag
	if mode != "" && mode != standin.ModeHealthy {
		ref += "-" + string(mode)
	}
	return ref
}

// Options configure a node. Zero durations take the test bed's defaults,
// a scaled-down kubelet (see docs/standin.md); KubeletTimings takes the
// real kubelet's instead.
type Options struct {
	// StateFile is the node state to start from, absolute or relative to
	// the repository root; default testdata/states/default.yaml. Its
	// addresses, ports, directories and etcd membership are rewritten to
	// a single-member node inside the root.
	StateFile string
	// VIP gives the node a VIP (so kube-vip runs) even when the state has
	// none. A state with a VIP keeps it (moved to VIPAddress).
	VIP bool
	// Mutate, if set, edits the rewritten state before it is saved.
	Mutate func(*nodestate.NodeState)
	// Root is the node's directory; default a new temp dir (t.TempDir
	// under Start). It must be empty or missing.
	Root string
	// NoManifests starts the kubelet stand-in on an empty manifest
	// directory and returns without writing or waiting.
	NoManifests bool

	KubeletTimings bool
	Relist         time.Duration // default 1s
	StartDelay     time.Duration // default 100ms (jitter 0.5 of it)
	GraceFloor     time.Duration // default 200ms
	GraceCap       time.Duration // default 5s
	BackoffBase    time.Duration // default 500ms
	BackoffCap     time.Duration // default 5s
	Housekeeping   time.Duration // default 100ms
	// ActiveTimeout bounds the wait for every component; default 90s.
	ActiveTimeout time.Duration

	// Images adds to (or replaces entries of) the node's image map.
	Images kubeletsim.ImageMap
	// Log receives the test bed's own messages; default discarded.
	Log *slog.Logger
}

// Node is a running node.
type Node struct {
	Root        string
	ManifestDir string
	// StateFile holds State, saved; the engine under test loads it.
	StateFile string
	State     *nodestate.NodeState
	Store     *manifest.Store
	// ImageMapFile is the kubelet stand-in's image map; MapImage edits it.
	ImageMapFile string
	// EventsFile collects every component stand-in's events.
	EventsFile string
	// KubeletDir is the stand-in's root: container logs under logs/.
	KubeletDir string
	// KubeletLog is the stand-in's decision log.
	KubeletLog string
	Kubelet    *kubeletsim.Client
	KubeletPID int
	// Scanner sees only the stand-in and its descendants: every
	// component, and no other test's.
	Scanner *proc.Scanner

	log      *slog.Logger
	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
	stopErr  error
}

// StartNode brings up a node: rewrites the state into the root, generates
// the PKI, builds the stand-ins, maps the images, starts the kubelet
// stand-in, writes every manifest with manifest.Store.WriteAll and waits
// until every roster component is active. On error after the stand-in
// started, the returned Node is non-nil and must be stopped.
func StartNode(ctx context.Context, opts Options) (*Node, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	root := opts.Root
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "stratum-node-"); err != nil {
			return nil, fmt.Errorf("testbed root: %w", err)
		}
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("testbed root: %w", err)
	}
	n := &Node{
		Root:         root,
		ManifestDir:  filepath.Join(root, "etc/kubernetes/manifests"),
		StateFile:    filepath.Join(root, "state.yaml"),
		ImageMapFile: filepath.Join(root, "images.yaml"),
		EventsFile:   filepath.Join(root, "standin-events.jsonl"),
		KubeletDir:   filepath.Join(root, "kubelet"),
		KubeletLog:   filepath.Join(root, "kubelet.log"),
		log:          opts.Log,
	}
	st, err := n.prepareState(opts)
	if err != nil {
		return nil, err
	}
	n.State = st
	if err := GeneratePKI(st.PKIDir, st.NodeName, st.AdvertiseAddress); err != nil {
		return nil, err
	}
	if err := writeKubeconfigs(st); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(n.ManifestDir, manifest.DirMode); err != nil {
		return nil, fmt.Errorf("testbed manifest dir: %w", err)
	}
	bins, err := standinBinaries()
	if err != nil {
		return nil, err
	}
	if err := n.writeImageMap(bins, opts.Images); err != nil {
		return nil, err
	}
	if err := n.startKubelet(bins.kubelet, opts); err != nil {
		return nil, err
	}
	n.Scanner = proc.Host().Within(n.KubeletPID)
	if n.Store, err = manifest.Open(n.ManifestDir, manifest.Options{Scanner: n.Scanner, Logger: n.log}); err != nil {
		return n, err
	}
	if opts.NoManifests {
		return n, nil
	}
	if _, err := n.Store.WriteAll(st); err != nil {
		return n, fmt.Errorf("testbed: write manifests: %w", err)
	}
	timeout := opts.ActiveTimeout
	if timeout == 0 {
		timeout = 90 * time.Second
	}
	if err := n.WaitActive(ctx, timeout); err != nil {
		return n, err
	}
	n.log.Info("testbed node up", "root", root, "roster", manifest.NamesFor(st), "kubelet", n.Kubelet.Addr)
	return n, nil
}

// prepareState loads the state file and rewrites it to run inside the root.
func (n *Node) prepareState(opts Options) (*nodestate.NodeState, error) {
	path := opts.StateFile
	if path == "" {
		path = "testdata/states/default.yaml"
	}
	if !filepath.IsAbs(path) {
		repo, err := etcdbuild.RepoRoot()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(repo, path)
	}
	st, err := nodestate.Load(path)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	r := n.Root
	st.AdvertiseAddress = "127.0.0.1"
	st.PKIDir = filepath.Join(r, "etc/kubernetes/pki")
	st.KubeconfigDir = filepath.Join(r, "etc/kubernetes")
	st.ConfigDir = filepath.Join(r, "etc/kubernetes/stratum")
	st.Etcd.DataDir = filepath.Join(r, "var/lib/etcd")
	if st.VIP != nil || opts.VIP {
		st.VIP = &nodestate.VIP{Address: VIPAddress, Interface: "lo"}
		if st.Images[nodestate.KubeVIP] == "" {
			st.Images[nodestate.KubeVIP] = ModeImage(nodestate.KubeVIP, KubeVIPTags[0], "")
		}
	}
	if st.Profile.Name == nodestate.ProfileCIS {
		repo, err := etcdbuild.RepoRoot()
		if err != nil {
			return nil, err
		}
		profDir := filepath.Join(r, "etc/stratum/profiles")
		if err := os.MkdirAll(profDir, 0o755); err != nil {
			return nil, fmt.Errorf("testbed profiles: %w", err)
		}
		for _, f := range []*string{&st.Profile.AuditPolicyFile, &st.Profile.AdmissionConfigFile} {
			src := *f
			if _, err := os.Stat(src); err != nil {
				src = filepath.Join(repo, "testdata/profiles", filepath.Base(*f))
			}
			b, err := os.ReadFile(src)
			if err != nil {
				return nil, fmt.Errorf("testbed profile file: %w", err)
			}
			*f = filepath.Join(profDir, filepath.Base(*f))
			if err := os.WriteFile(*f, b, 0o644); err != nil {
				return nil, fmt.Errorf("testbed profile file: %w", err)
			}
		}
		st.Profile.AuditLogDir = filepath.Join(r, "var/log/kubernetes/audit")
	}
	ports, err := FreePorts(6)
	if err != nil {
		return nil, err
	}
	st.Ports = nodestate.Ports{EtcdClient: ports[0], EtcdPeer: ports[1], EtcdMetrics: ports[2], APIServer: ports[3], ControllerManager: ports[4], Scheduler: ports[5]}
	st.Etcd.InitialCluster = st.Etcd.MemberName + "=https://" + net.JoinHostPort(st.AdvertiseAddress, strconv.Itoa(st.Ports.EtcdPeer))
	st.Etcd.InitialClusterState = "new"
	if opts.Mutate != nil {
		opts.Mutate(st)
	}
	for _, d := range []string{st.KubeconfigDir, st.ConfigDir, filepath.Dir(st.Etcd.DataDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
	}
	if err := st.Save(n.StateFile); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	return st, nil
}

// handedOut is every port FreePorts returned in this process: nodes started
// in parallel (the crash matrix) never get the same port, even when the
// kernel offers a port again after the first node's check released it.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePorts returns n distinct free TCP ports on 127.0.0.1, none returned
// before in this process. They are free when returned; another process may
// still take one before it is used.
func FreePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testbed: free port: %w", err)
		}
		lns = append(lns, l)
		port := l.Addr().(*net.TCPAddr).Port
		if handedOut.ports[port] {
			continue // held open until return, so the next try gets another
		}
		handedOut.ports[port] = true
		out = append(out, port)
	}
	return out, nil
}

func writeKubeconfigs(st *nodestate.NodeState) error {
	for _, name := range []string{"admin.conf", "controller-manager.conf", "scheduler.conf"} {
		b := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: https://%s\n    certificate-authority: %s\ncontexts:\n- name: default\n  context: {cluster: kubernetes, user: default}\ncurrent-context: default\nusers:\n- name: default\n  user: {}\n",
			net.JoinHostPort(st.AdvertiseAddress, strconv.Itoa(st.Ports.APIServer)), filepath.Join(st.PKIDir, "ca.crt"))
		if err := os.WriteFile(filepath.Join(st.KubeconfigDir, name), []byte(b), 0o600); err != nil {
			return fmt.Errorf("testbed kubeconfig: %w", err)
		}
	}
	return nil
}

// writeImageMap maps every etcd build, every stand-in image in every mode,
// and the state's own images (an etcd image the map lacks runs etcd 3.5).
func (n *Node) writeImageMap(bins *binaries, extra kubeletsim.ImageMap) error {
	m := kubeletsim.ImageMap{}
	marker := func(env map[string]string) map[string]string {
		out := map[string]string{MarkerEnv: n.Root}
		for k, v := range env {
			out[k] = v
		}
		return out
	}
	var etcd35 string
	for _, b := range etcdbuild.Builds {
		path, err := etcdbuild.Binary(b.Minor)
		if err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		if etcd35 == "" {
			etcd35 = path
		}
		m[b.Image] = kubeletsim.Image{Binary: path, Env: marker(nil)}
	}
	binDir := filepath.Join(n.Root, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	for comp := range Repos {
		// The program is exec'd under the component's own name, so the
		// kernel's comm matches what a node shows, not just argv[0].
		link := filepath.Join(binDir, comp)
		if err := os.Symlink(bins.component, link); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("testbed: %w", err)
		}
		tags := KubeTags
		if comp == nodestate.KubeVIP {
			tags = KubeVIPTags
		}
		for _, tag := range tags {
			for _, mode := range standin.Modes {
				m[ModeImage(comp, tag, mode)] = kubeletsim.Image{Binary: link, Env: marker(map[string]string{
					standin.EnvMode: string(mode), standin.EnvEvents: n.EventsFile,
				})}
			}
		}
	}
	for comp, ref := range n.State.Images {
		if _, ok := m[ref]; ok {
			continue
		}
		if comp == nodestate.Etcd {
			m[ref] = kubeletsim.Image{Binary: etcd35, Env: marker(nil)}
		} else {
			m[ref] = kubeletsim.Image{Binary: filepath.Join(binDir, comp), Env: marker(map[string]string{standin.EnvEvents: n.EventsFile})}
		}
	}
	for ref, img := range extra {
		img.Env = marker(img.Env)
		m[ref] = img
	}
	return m.Save(n.ImageMapFile)
}

// MapImage adds or replaces ref in the node's image map; the stand-in reads
// the map at every container start. img.Env gets MarkerEnv added.
func (n *Node) MapImage(ref string, img kubeletsim.Image) error {
	m, err := kubeletsim.LoadImageMap(n.ImageMapFile)
	if err != nil {
		return err
	}
	env := map[string]string{MarkerEnv: n.Root}
	for k, v := range img.Env {
		env[k] = v
	}
	img.Env = env
	m[ref] = img
	tmp := n.ImageMapFile + ".new"
	if err := m.Save(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, n.ImageMapFile)
}

// StandinBinary is the component stand-in installed under component's name
// in this node (for MapImage).
func (n *Node) StandinBinary(component string) string { return filepath.Join(n.Root, "bin", component) }

func (n *Node) startKubelet(bin string, opts Options) error {
	d := func(v, def time.Duration) string {
		if opts.KubeletTimings {
			return "0"
		}
		if v == 0 {
			v = def
		}
		return v.String()
	}
	args := []string{
		"--manifest-dir=" + n.ManifestDir,
		"--root-dir=" + n.KubeletDir,
		"--node-name=" + n.State.NodeName,
		"--image-map=" + n.ImageMapFile,
		"--relist=" + d(opts.Relist, time.Second),
		"--start-delay=" + d(opts.StartDelay, 100*time.Millisecond),
		"--grace-floor=" + d(opts.GraceFloor, 200*time.Millisecond),
		"--grace-cap=" + d(opts.GraceCap, 5*time.Second),
		"--backoff-base=" + d(opts.BackoffBase, 500*time.Millisecond),
		"--backoff-cap=" + d(opts.BackoffCap, 5*time.Second),
		"--housekeeping=" + d(opts.Housekeeping, 100*time.Millisecond),
	}
	logf, err := os.OpenFile(n.KubeletLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{MarkerEnv + "=" + n.Root, "PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = n.Root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := kubeletsim.Spawn(cmd); err != nil {
		return fmt.Errorf("testbed: start kubelet stand-in: %w", err)
	}
	n.cmd, n.KubeletPID, n.exited = cmd, cmd.Process.Pid, make(chan struct{})
	go func() { _ = cmd.Wait(); close(n.exited) }()
	c, err := kubeletsim.NewClient(n.KubeletDir, 30*time.Second)
	if err != nil {
		return err
	}
	n.Kubelet = c
	return nil
}

// Target is manifest.Target for the node's state.
func (n *Node) Target(name string) (proc.Target, error) { return manifest.Target(n.State, name) }

// WaitActive waits until every component of the node's roster is active
// (proc.Scanner.WaitActive on manifest.Target, scoped to the stand-in).
func (n *Node) WaitActive(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, name := range manifest.NamesFor(n.State) {
		t, err := n.Target(name)
		if err != nil {
			return err
		}
		if err := n.Scanner.WaitActive(ctx, t, time.Until(deadline)); err != nil {
			return fmt.Errorf("testbed: %w (kubelet log %s)", err, n.KubeletLog)
		}
	}
	return nil
}

// Events reads every component stand-in event of this node.
func (n *Node) Events() ([]standin.Event, error) { return standin.ReadEvents(n.EventsFile) }

// EtcdEndpoint is the local etcd's client URL.
func (n *Node) EtcdEndpoint() string { return EtcdURL(n.State.Ports.EtcdClient) }

// EtcdTLS is a client TLS configuration for the local etcd: the
// apiserver-etcd-client certificate and the etcd CA.
func (n *Node) EtcdTLS() (*tls.Config, error) { return EtcdClientTLS(n.State.PKIDir) }

// EtcdURL is the client URL of an etcd listening on 127.0.0.1:port.
func EtcdURL(port int) string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// EtcdClientTLS is a client TLS configuration for the etcd of the kubeadm
// PKI in pkiDir: the apiserver-etcd-client certificate and the etcd CA.
func EtcdClientTLS(pkiDir string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "apiserver-etcd-client.crt"), filepath.Join(pkiDir, "apiserver-etcd-client.key"))
	if err != nil {
		return nil, fmt.Errorf("testbed etcd client cert: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(pkiDir, "etcd/ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("testbed etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Stop tears the node down: removes every visible file in the manifest
// directory and waits for the stand-in to report no pods, stops the
// stand-in (SIGTERM, then SIGKILL of its process group), then kills any
// process still carrying the node's marker and waits until none is left.
// It returns an error naming whatever had to be killed by force or could
// not be; a second call returns the first call's result.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

func (n *Node) stop() error {
	var problems []string
	if n.cmd != nil && n.Kubelet != nil {
		if paths, err := kubeletsim.ListDir(n.ManifestDir); err == nil {
			for _, p := range paths {
				_ = os.RemoveAll(p)
			}
		}
		select {
		case <-n.exited:
			problems = append(problems, "the kubelet stand-in had already exited (see "+n.KubeletLog+")")
		default:
			err := n.Kubelet.WaitFor(context.Background(), "every pod gone after the manifests were removed", 60*time.Second,
				func(st []kubeletsim.PodStatus) bool { return len(st) == 0 })
			if err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(15 * time.Second):
			problems = append(problems, "the kubelet stand-in ignored SIGTERM for 15s; killed")
			_ = syscall.Kill(-n.KubeletPID, syscall.SIGKILL)
			<-n.exited
		}
	}
	left, err := n.killLeftovers(10 * time.Second)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes left behind and killed: %v", left))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Leftovers lists the live processes carrying this node's marker.
func (n *Node) Leftovers() ([]int, error) { return markedProcesses(n.Root) }

func (n *Node) killLeftovers(timeout time.Duration) ([]int, error) {
	first, err := markedProcesses(n.Root)
	if err != nil || len(first) == 0 {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		pids, err := markedProcesses(n.Root)
		if err != nil {
			return first, err
		}
		if len(pids) == 0 {
			return first, nil
		}
		if time.Now().After(deadline) {
			return first, fmt.Errorf("processes %v survived SIGKILL for %s", pids, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// markedProcesses scans /proc for live processes whose environment holds
// MarkerEnv=root. Processes that vanish or cannot be read are skipped:
// teardown runs as the user that started them.
func markedProcesses(root string) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("testbed: scan /proc: %w", err)
	}
	want := []byte(MarkerEnv + "=" + root + "\x00")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !containsEnv(env, want) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out, nil
}

func containsEnv(env, want []byte) bool {
	return strings.HasPrefix(string(env), string(want)) || strings.Contains(string(env), "\x00"+string(want))
}

func tail(b []byte, lines int) string {
	s := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(s) > lines {
		s = s[len(s)-lines:]
	}
	return strings.Join(s, "\n")
}

// binaries are the stand-in programs, built once per process.
type binaries struct{ kubelet, component string }

var standinBinaries = sync.OnceValues(func() (*binaries, error) {
	repo, err := etcdbuild.RepoRoot()
	if err != nil {
		return nil, err
	}
	cache, err := etcdbuild.CacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "standin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	b := &binaries{kubelet: filepath.Join(dir, "kubelet-standin"), component: filepath.Join(dir, "component-standin")}
	for pkg, out := range map[string]string{"./internal/harness/cmd/kubelet-standin": b.kubelet, "./internal/harness/cmd/component-standin": b.component} {
		// Built to a private name and renamed: a process of another test
		// binary may be running the previous build.
		tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, pkg)
		cmd.Dir = repo
		outb, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("testbed: go build %s: %w\n%s", pkg, err, outb)
		}
		if err := os.Rename(tmp, out); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
	}
	return b, nil
})
