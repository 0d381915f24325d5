package testbed

// This file holds a cluster: n nodes on one machine whose etcd static pods
// form one n-member etcd cluster.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ciq/stratum-upgrade/manifest"
)

// MaxClusterNodes is the largest cluster StartCluster brings up.
const MaxClusterNodes = 9

// Cluster is n running nodes whose etcds are the members of one cluster.
type Cluster struct {
	// Nodes[i-1] is node i: node name and etcd member name node-i,
	// advertise address NodeAddress(i), root <Options.Root>/node-i.
	Nodes []*Node

	// failing holds the numbers of the nodes that failed to come up or to
	// stop, whose logs StartCluster's cleanup dumps.
	mu      sync.Mutex
	failing map[int]bool
	// netns is Options.NetNSNode's network, removed by Stop.
	netns    *netns
	stopOnce sync.Once
	stopErr  error
}

// NodeAddress is the advertise address of node i (1-based) of a cluster:
// 127.0.0.(10+i), a loopback address Linux answers on without setup, away
// from 127.0.0.1 (single nodes) and VIPAddress.
func NodeAddress(i int) string { return "127.0.0." + strconv.Itoa(10+i) }

// StartClusterContext brings up n nodes (1 <= n <= MaxClusterNodes) from
// opts: node i as StartNode would, except that its state names it node-i
// (node and etcd member), advertises NodeAddress(i), and every node's
// etcd has the same initialCluster, all n members with their peer URLs
// https://NodeAddress(i):<peer port>, state "new". All ports are picked
// before any state is written; every node's certificates are issued from
// one set of CAs (NewCAs), so the members trust each other and a client
// certificate of one node is good on every node. Every kubelet stand-in is
// started, then every node's manifests are written, and only then does it
// wait until every node's roster is active within ActiveTimeout (members
// wait for each other's quorum). Options.Mutate applies to every node,
// Options.MutateNode to node i with i. With NoManifests it returns after
// the stand-ins started.
//
// Bad input (n out of range, a Root that cannot be made) is an error with
// nothing started. On error after a stand-in started the returned Cluster
// is non-nil and must be stopped.
func StartClusterContext(ctx context.Context, n int, opts Options) (*Cluster, error) {
	if n < 1 || n > MaxClusterNodes {
		return nil, fmt.Errorf("testbed cluster: %d nodes: want 1 to %d", n, MaxClusterNodes)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	root := opts.Root
	if root == "" {
		var err error
		if root, err = os.MkdirTemp("", "stratum-cluster-"); err != nil {
			return nil, fmt.Errorf("testbed cluster root: %w", err)
		}
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("testbed cluster root: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("testbed cluster root: %w", err)
	}
	cas, err := NewCAs()
	if err != nil {
		return nil, fmt.Errorf("testbed cluster: %w", err)
	}
	ports, err := FreePorts(n * portsPerNode)
	if err != nil {
		return nil, fmt.Errorf("testbed cluster: %w", err)
	}
	if opts.NetNSNode < 0 || opts.NetNSNode > n {
		return nil, fmt.Errorf("testbed cluster: Options.NetNSNode %d: want 0 (none) or 1 to %d", opts.NetNSNode, n)
	}
	c := &Cluster{failing: map[int]bool{}}
	address := NodeAddress
	if opts.NetNSNode > 0 {
		if c.netns, err = setupNetNS(n, opts.NetNSNode); err != nil {
			return nil, err
		}
		address = NetNSAddress
	}
	members := make([]*member, n)
	peers := make([]string, n)
	for i := range members {
		m := &member{number: i + 1, address: address(i + 1), ports: nodePorts(ports[i*portsPerNode:]), cas: cas}
		switch {
		case i+1 == opts.NetNSNode:
			m.netns = c.netns
		case opts.NetNSNode > 0:
			// The nodes outside share the bridge, whose first address
			// the kernel gives every connection they make (the local
			// route of a secondary address has the primary as its
			// source): etcd checks a peer's certificate against the
			// address its connection comes from.
			m.also = []string{address(firstOutside(opts.NetNSNode))}
		}
		members[i] = m
		peers[i] = m.name() + "=" + EtcdURLAt(m.address, m.ports.EtcdPeer)
	}
	for _, m := range members {
		m.initialCluster = strings.Join(peers, ",")
		o := opts
		o.Root = filepath.Join(root, m.name())
		o.Log = opts.Log.With("node", m.name())
		node, err := bootNode(ctx, o, m)
		if node != nil {
			c.Nodes = append(c.Nodes, node)
		}
		if err != nil {
			return c.orNil(), fmt.Errorf("testbed cluster %s: %w", m.name(), err)
		}
	}
	if opts.NoManifests {
		return c, nil
	}
	for _, node := range c.Nodes {
		if err := node.writeManifests(); err != nil {
			return c, fmt.Errorf("testbed cluster %s: %w", node.State.NodeName, err)
		}
	}
	deadline := time.Now().Add(activeTimeout(opts))
	var errs []error
	for i, node := range c.Nodes {
		// One deadline for all: the nodes come up together, so the
		// later waits are short.
		if err := node.WaitActive(ctx, max(time.Until(deadline), time.Second)); err != nil {
			c.markFailing(i + 1)
			errs = append(errs, fmt.Errorf("testbed cluster %s: %w", node.State.NodeName, err))
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	opts.Log.Info("testbed cluster up", "root", root, "nodes", n, "roster", manifest.NamesFor(c.Nodes[0].State))
	return c, nil
}

// firstOutside is the number of the first node outside the namespace of
// node self: the owner of the bridge's first (primary) address.
func firstOutside(self int) int {
	if self == 1 {
		return 2
	}
	return 1
}

// orNil is c, or nil when no node was started (nothing to stop; the
// network of Options.NetNSNode is removed).
func (c *Cluster) orNil() *Cluster {
	if len(c.Nodes) == 0 {
		if c.netns != nil {
			_ = c.netns.close()
		}
		return nil
	}
	return c
}

func (c *Cluster) markFailing(i int) {
	c.mu.Lock()
	c.failing[i] = true
	c.mu.Unlock()
}

// Endpoints are every member's client URL, https://NodeAddress(i):<client
// port>, in node order: the URLs the members advertise.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = EtcdURLAt(n.State.AdvertiseAddress, n.State.Ports.EtcdClient)
	}
	return out
}

// EtcdURLAt is the https URL of an etcd listener (client or peer) on
// address:port.
func EtcdURLAt(address string, port int) string {
	return "https://" + net.JoinHostPort(address, strconv.Itoa(port))
}

// EtcdTLS is a client TLS configuration good on every member: the etcd CA
// and node 1's etcd/healthcheck-client certificate (kubeadm's etcdctl
// pair, the one etcddata.Endpoint uses).
func (c *Cluster) EtcdTLS() (*tls.Config, error) {
	if len(c.Nodes) == 0 {
		return nil, errors.New("testbed cluster: no node")
	}
	etcdPKI := filepath.Join(c.Nodes[0].State.PKIDir, "etcd")
	cert, err := tls.LoadX509KeyPair(filepath.Join(etcdPKI, "healthcheck-client.crt"), filepath.Join(etcdPKI, "healthcheck-client.key"))
	if err != nil {
		return nil, fmt.Errorf("testbed cluster etcd client cert: %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(etcdPKI, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("testbed cluster etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("testbed cluster etcd CA %s: no certificate", filepath.Join(etcdPKI, "ca.crt"))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Stop stops every node at once (Node.Stop each, so a node already
// stopped returns its first result), then removes the network of
// Options.NetNSNode, and returns every error, each node's naming its node;
// a second call returns the first call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		errs := make([]error, len(c.Nodes))
		var wg sync.WaitGroup
		for i, n := range c.Nodes {
			wg.Go(func() {
				if err := n.Stop(); err != nil {
					c.markFailing(i + 1)
					errs[i] = fmt.Errorf("node-%d: %w", i+1, err)
				}
			})
		}
		wg.Wait()
		if c.netns != nil {
			if err := c.netns.close(); err != nil {
				errs = append(errs, err)
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// StartCluster brings up an n-node cluster for t (see StartClusterContext)
// and registers its Stop with t.Cleanup, which runs even when t fails; a
// failure to start or a process left behind fails t. When t failed, the
// cleanup logs the logs of the nodes that failed to come up or to stop, or
// of every node when none did.
func StartCluster(t TB, n int, opts Options) *Cluster {
	t.Helper()
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(tbWriter{t}, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := StartClusterContext(ctx, n, opts)
	if c != nil {
		t.Cleanup(func() {
			if err := c.Stop(); err != nil {
				t.Errorf("testbed cluster teardown: %v", err)
			}
			if t.Failed() {
				c.dumpLogs(t)
			}
		})
	}
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	return c
}

// dumpLogs logs the failing nodes' logs, or every node's when none is
// known to have failed.
func (c *Cluster) dumpLogs(t TB) {
	c.mu.Lock()
	failing := len(c.failing) > 0
	c.mu.Unlock()
	for i, n := range c.Nodes {
		c.mu.Lock()
		f := c.failing[i+1]
		c.mu.Unlock()
		if f || !failing {
			t.Logf("testbed cluster: logs of node-%d (%s)", i+1, n.Root)
			n.dumpLogs(t)
		}
	}
}
