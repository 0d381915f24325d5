// Package testbed brings up a control-plane node for tests and the demo:
// the kubelet stand-in (internal/harness/kubeletsim) as a subprocess watching a
// manifest directory in a private root, real etcd (internal/harness/etcdbuild) and
// the component stand-ins (internal/harness/standin) mapped to the node state's
// images, kubeadm's PKI generated for real, and the manifests rendered by
// package manifest. Start waits until every component is active and
// registers a teardown that leaves no process behind even when the test
// fails. StartCluster does the same for several nodes, each at its own
// loopback address, whose etcds form one cluster (cluster.go).
//
// Everything lives under the node's root directory; every port is a free
// loopback port; the VIP, if any, is a loopback address kube-vip's stand-in
// never touches. Every process the node runs carries the environment
// variable MarkerEnv=<root>, which is how teardown finds and kills
// anything that escaped the stand-in.
package testbed

// This file holds the node itself: its options, StartNode, and its accessors (target, etcd).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
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
	// Mutate, if set, edits the rewritten state before it is saved; under
	// StartCluster it runs for every node.
	Mutate func(*nodestate.NodeState)
	// MutateNode, StartCluster's only (StartNode refuses it), edits node
	// i's rewritten state (i = 1..n, the node named node-i, Cluster.Nodes[i-1])
	// after Mutate and before it is saved. An edit of the address, ports
	// or etcd membership is the caller's to keep consistent.
	MutateNode func(i int, st *nodestate.NodeState)
	// Root is the node's directory (the cluster's under StartCluster: node
	// i in Root/node-i); default a new temp dir (t.TempDir under Start).
	// It must be empty or missing.
	Root string
	// NoManifests starts the kubelet stand-in on an empty manifest
	// directory and returns without writing or waiting.
	NoManifests bool
	// NetNSNode, StartCluster's only, runs node i (1..n; 0: none) in a
	// network namespace of its own, NetNSName, which Node.Cut cuts off
	// from the others (netns.go): every node's address is then
	// NetNSAddress(i) on the bridge NetNSBridge, which the cluster's Stop
	// removes with the namespace. Root and iproute2 (NetNSSupported);
	// one such cluster at a time on a machine.
	NetNSNode int

	KubeletTimings bool
	Relist         time.Duration // default 1s
	StartDelay     time.Duration // default 100ms (jitter 0.5 of it)
	StartLatency   time.Duration // default 0, KubeletTimings too (kubeletsim.Config.StartLatency; real kubelet ~0.47s)
	GraceFloor     time.Duration // default 200ms
	GraceCap       time.Duration // default 5s
	BackoffBase    time.Duration // default 500ms
	BackoffCap     time.Duration // default 5s
	Housekeeping   time.Duration // default 100ms
	// ActiveTimeout bounds the wait for every component; default 90s.
	ActiveTimeout time.Duration

	// Real runs the real control plane: the state's kube-apiserver,
	// kube-controller-manager and kube-scheduler images of its
	// kubernetesVersion, one of kubebuild.Versions, run the real binaries
	// (built first if the cache lacks them, minutes) instead of the
	// stand-in. kube-apiserver gets --endpoint-reconciler-type=none in the
	// state's extraArgs (before Mutate): v1.37 refuses the loopback
	// advertise address otherwise, and one node needs no reconciler.
	// Whatever the option, the image map maps the images of every version
	// already built to its real binaries.
	Real bool

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
	// CgroupParent is the cgroup v2 directory the stand-in makes its pod
	// cgroups in (kubepods/<qos>/pod<UID>/<container>), "" when the
	// machine lets the test make none (see makeCgroupParent).
	CgroupParent string

	log      *slog.Logger
	cmd      *exec.Cmd
	exited   chan struct{}
	stopOnce sync.Once
	stopErr  error
	// kubeletBin and kubeletOpts start the stand-in again (Reboot).
	kubeletBin  string
	kubeletOpts Options
	// netns is the node's network namespace (Options.NetNSNode).
	netns *netns
}

// StartNode brings up a node: rewrites the state into the root, generates
// the PKI, builds the stand-ins, maps the images, starts the kubelet
// stand-in, writes every manifest with manifest.Store.WriteAll and waits
// until every roster component is active. It refuses Options.MutateNode
// (StartCluster's) before it does anything. On error after the stand-in
// started, the returned Node is non-nil and must be stopped.
func StartNode(ctx context.Context, opts Options) (*Node, error) {
	if opts.MutateNode != nil {
		return nil, errors.New("testbed: Options.MutateNode is StartCluster's; a single node takes Mutate")
	}
	if opts.NetNSNode != 0 {
		return nil, errors.New("testbed: Options.NetNSNode is StartCluster's")
	}
	n, err := bootNode(ctx, opts, nil)
	if err != nil || opts.NoManifests {
		return n, err
	}
	if err := n.writeManifests(); err != nil {
		return n, err
	}
	if err := n.WaitActive(ctx, activeTimeout(opts)); err != nil {
		return n, err
	}
	n.log.Info("testbed node up", "root", n.Root, "roster", manifest.NamesFor(n.State), "kubelet", n.Kubelet.Addr)
	return n, nil
}

// activeTimeout is Options.ActiveTimeout or its default.
func activeTimeout(opts Options) time.Duration {
	if opts.ActiveTimeout == 0 {
		return 90 * time.Second
	}
	return opts.ActiveTimeout
}

// bootNode does everything StartNode does before it writes the manifests:
// the state (as member m of a cluster when m is set), the PKI (issued from
// m's CAs), the stand-ins, the image map, the kubelet stand-in, the
// scanner and the store. On error after the stand-in started, the
// returned Node is non-nil and must be stopped.
func bootNode(ctx context.Context, opts Options, m *member) (*Node, error) {
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
	st, err := n.prepareState(opts, m)
	if err != nil {
		return nil, err
	}
	n.State = st
	if m != nil && m.netns != nil {
		n.netns = m.netns
		// The loopback listeners, reached from here (netns.go).
		for _, p := range []int{st.Ports.EtcdClient, st.Ports.EtcdMetrics, st.Ports.APIServer, st.Ports.ControllerManager, st.Ports.Scheduler} {
			if err := n.netns.forward(p); err != nil {
				return nil, err
			}
		}
	}
	if m != nil {
		err = m.cas.IssueNode(st.PKIDir, st.NodeName, st.AdvertiseAddress, m.also...)
	} else {
		err = GeneratePKI(st.PKIDir, st.NodeName, st.AdvertiseAddress)
	}
	if err != nil {
		return nil, err
	}
	if err := WriteKubeconfigs(st); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(n.ManifestDir, manifest.DirMode); err != nil {
		return nil, fmt.Errorf("testbed manifest dir: %w", err)
	}
	if opts.Real {
		if _, err := kubebuild.Binaries(ctx, st.KubernetesVersion); err != nil {
			return nil, fmt.Errorf("testbed: real control plane: %w", err)
		}
	}
	bins, err := standinBinaries()
	if err != nil {
		return nil, err
	}
	if err := n.writeImageMap(bins, opts.Images); err != nil {
		return nil, err
	}
	if err := n.startKubelet(bins.kubelet, opts); err != nil {
		// No Node, so no Stop: the cgroup parent goes now (best effort:
		// a stand-in that started pods and then failed keeps it busy).
		_ = n.clearCgroups(true)
		return nil, err
	}
	n.Scanner = proc.Host().Within(n.KubeletPID)
	if n.Store, err = manifest.Open(n.ManifestDir, manifest.Options{Scanner: n.Scanner, Logger: n.log}); err != nil {
		return n, err
	}
	return n, nil
}

// writeManifests writes every manifest of the node's state.
func (n *Node) writeManifests() error {
	if _, err := n.Store.WriteAll(n.State); err != nil {
		return fmt.Errorf("testbed: write manifests: %w", err)
	}
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
			return fmt.Errorf("testbed: %w (kubelet log %s)%s", err, n.KubeletLog, n.containerLogTail(name))
		}
	}
	return nil
}

// Events reads every component stand-in event of this node.
func (n *Node) Events() ([]standin.Event, error) { return standin.ReadEvents(n.EventsFile) }

// EtcdEndpoint is the local etcd's client URL on 127.0.0.1, which etcd
// listens on whatever the node's advertise address (manifest renders it
// into --listen-client-urls), as etcddata.Endpoint does.
func (n *Node) EtcdEndpoint() string { return EtcdURL(n.State.Ports.EtcdClient) }

// EtcdTLS is a client TLS configuration for the local etcd: the
// apiserver-etcd-client certificate and the etcd CA.
func (n *Node) EtcdTLS() (*tls.Config, error) { return EtcdClientTLS(n.State.PKIDir) }

// EtcdURL is the client URL of an etcd listening on 127.0.0.1:port.
func EtcdURL(port int) string { return EtcdURLAt("127.0.0.1", port) }

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

// containerLogTail is the last lines of the newest container log of
// component name under the stand-in's logs/, for an error that would
// otherwise only say the component never answered (why it exited is in
// its own output). It is empty when there is no log.
func (n *Node) containerLogTail(name string) string {
	logs, _ := filepath.Glob(filepath.Join(n.KubeletDir, "logs", "kube-system_"+name+"-*", "*.log"))
	var newest string
	var newestMod time.Time
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.ModTime().After(newestMod) {
			newest, newestMod = l, fi.ModTime()
		}
	}
	if newest == "" {
		return ""
	}
	b, err := os.ReadFile(newest)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(len(lines)-15, 0):]
	return "\n" + newest + " ends:\n  " + strings.Join(lines, "\n  ")
}
