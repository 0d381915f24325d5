package realcluster

// The cluster: the bridge, its nodes (each its network namespace, holder
// and containerd), and the host paths that had to be made as mount points.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/e2e"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// DefaultDir is where a cluster keeps its nodes' directories; one cluster
// at a time uses it (a lock beside it), as the names of net.go are fixed.
const DefaultDir = "/tmp/stratum-rc"

// PauseImage is the sandbox image every node's containerd runs pods in:
// the one kubeadm v1.36.3 names.
const PauseImage = "registry.k8s.io/pause:3.10.2"

// Options configure Start.
type Options struct {
	// Nodes is how many nodes to make (1 to MaxNodes).
	Nodes int
	// Dir defaults to DefaultDir; wiped at start and at Stop.
	Dir string
	// Logf receives progress; default none.
	Logf func(string, ...any)
}

// Cluster is a running set of nodes on Bridge.
type Cluster struct {
	Dir   string
	Nodes []*Node
	// HostsDir is containerd's registry config_path, shared by the nodes.
	HostsDir string
	// Timings are how long each step of Start and of later bring-up steps
	// took, in order.
	Timings []Timing

	// Token and CertificateKey are the bootstrap token and the key of the
	// uploaded certificates (Init), which Join uses.
	Token, CertificateKey string

	registry *daemon
	lb       *balancer
	created  []string // mount points made on the host
	unlock   func()
	logf     func(string, ...any)
	stopOnce sync.Once
	stopErr  error
	sigs     chan os.Signal
}

// Timing is one step's duration.
type Timing struct {
	Step string
	Took time.Duration
}

func (c *Cluster) timed(step string, began time.Time) {
	c.Timings = append(c.Timings, Timing{step, time.Since(began)})
	c.logf("%s: %s", step, time.Since(began).Round(time.Millisecond))
}

// Supported is nil when a cluster can be made here: root, iproute2,
// nsenter and unshare, containerd, runc and ctr. Otherwise it says what
// is missing.
func Supported() error {
	if err := testbed.NetNSSupported(); err != nil {
		return err
	}
	var missing []string
	for _, p := range []string{"nsenter", "unshare", "containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if _, err := os.Stat(filepath.Join(CNIPluginDir, "bridge")); err != nil {
		missing = append(missing, filepath.Join(CNIPluginDir, "bridge"))
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (apt-get install containerd runc util-linux containernetworking-plugins)", strings.Join(missing, ", "))
	}
	return nil
}

// Start takes the lock, removes whatever a killed run left, makes the
// bridge and o.Nodes nodes and starts each node's containerd. On error it
// tears down what it made; a returned Cluster must be stopped (Stop), and
// SIGINT or SIGTERM stops it too before the process exits.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return nil, fmt.Errorf("real cluster: %d nodes: want 1 to %d", o.Nodes, MaxNodes)
	}
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if err := Supported(); err != nil {
		return nil, fmt.Errorf("real cluster: %w", err)
	}
	// The e2e's kubelet host creates and, at its end, removes the same
	// host paths (e2e/host.go): removed on the host while a node has its
	// directory bound there, they vanish from the node too. One of the two
	// at a time: the cluster takes the e2e host's lock as well.
	unlockHost, err := build.Lock(e2e.DefaultRoot+".lock", 60*time.Minute)
	if err != nil {
		return nil, err
	}
	unlockCluster, err := build.Lock(o.Dir+".lock", 30*time.Minute)
	if err != nil {
		unlockHost()
		return nil, err
	}
	unlock := func() { unlockCluster(); unlockHost() }
	c := &Cluster{Dir: o.Dir, HostsDir: filepath.Join(o.Dir, "certs.d"), unlock: unlock, logf: o.Logf}
	began := time.Now()
	if err := cleanStale(o.Dir); err != nil {
		unlock()
		return nil, err
	}
	c.timed("clean what an earlier run left", began)
	c.sigs = make(chan os.Signal, 1)
	signal.Notify(c.sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if s, ok := <-c.sigs; ok {
			c.logf("%s: tearing the cluster down", s)
			_ = c.Stop()
			os.Exit(1)
		}
	}()
	if err := c.start(ctx, o.Nodes); err != nil {
		return c, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, nodes int) error {
	if err := os.MkdirAll(c.HostsDir, 0o755); err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	if err := c.makeMountPoints(); err != nil {
		return err
	}
	began := time.Now()
	if err := addBridge(); err != nil {
		return err
	}
	c.timed("bridge", began)
	for i := 1; i <= nodes; i++ {
		n := &Node{Index: i, Name: NodeName(i), Address: NodeAddress(i), NetNS: NetNS(i), Dir: filepath.Join(c.Dir, NodeName(i)),
			CgroupRoot: "/stratum-rc-" + NodeName(i), daemons: map[string]*daemon{}, logf: c.logf}
		n.ContainerdSock = n.HostPath("/run/containerd/containerd.sock")
		c.Nodes = append(c.Nodes, n)
		began := time.Now()
		if err := addNetNS(i); err != nil {
			return err
		}
		if err := n.startHolder(); err != nil {
			return err
		}
		if err := makeCgroup(n.CgroupRoot); err != nil {
			return err
		}
		c.timed(n.Name+": network and mount namespaces", began)
		began = time.Now()
		if err := n.startContainerd(ctx, PauseImage, c.HostsDir); err != nil {
			return err
		}
		c.timed(n.Name+": containerd", began)
	}
	return nil
}

// makeMountPoints makes the NodePaths the host lacks (the bind mounts
// need a mount point), recording the top of each for Stop and, in a file
// beside Dir, for the cleanup of a killed run.
func (c *Cluster) makeMountPoints() error {
	seen := map[string]bool{}
	for _, p := range NodePaths {
		top := ""
		for d := p; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
				top = d
			}
		}
		if top != "" && !seen[top] {
			seen[top] = true
			c.created = append(c.created, top)
		}
	}
	if err := os.WriteFile(createdRecord(c.Dir), []byte(strings.Join(c.created, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	for _, p := range NodePaths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("real cluster: mount point: %w", err)
		}
	}
	return nil
}

func createdRecord(dir string) string { return dir + ".created" }

// Node is node name ("cp-1").
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}
