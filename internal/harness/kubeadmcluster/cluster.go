package kubeadmcluster

// This file runs the composed manifests: three test bed nodes, grown into
// one etcd cluster as kubeadm grows it.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/adopt"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Nodes is how many nodes the cluster has: the fixtures describe three.
const Nodes = 3

// JoinTimeout bounds one node's join: the learner promoted (it must have
// caught up with the leader) and every component of the node active.
const JoinTimeout = 3 * time.Minute

// Cluster is the running kubeadm-shaped cluster. Every Node's State is the
// node state adoption derives from the manifests it runs (adopt.Derive),
// what the test bed's helpers (Target, Endpoints, WaitActive) go by.
type Cluster struct {
	*testbed.Cluster
	// Version is the Kubernetes version kubeadm made it with.
	Version string
	// Configs[i] is node i+1's kubeadm configuration file, moved as its
	// manifests were (for init --from-kubeadm --kubeadm-config).
	Configs []string
}

// Start brings up the cluster of kubeadm version's manifests for t, or
// skips t when the real kube-apiserver of version or of any later version
// of kubebuild.Versions is not built (make real-binaries builds them; a
// test upgrades to the next one). kube-apiserver is the real one; the
// controller-manager and the scheduler are the stand-in (at every version
// of kubebuild.Versions); etcd is the real etcd of the minor of each
// version's kubeadm etcd image. Node 1 starts alone as `kubeadm init`
// leaves it; node 2, then node 3, is added to the etcd cluster as a
// learner, its manifests written, the learner promoted, and the node's
// components waited for. The cluster is stopped when t ends.
func Start(t *testing.T, version string) *Cluster {
	t.Helper()
	for _, v := range kubebuild.Versions[max(0, slices.Index(kubebuild.Versions, version)):] {
		if !kubebuild.Built(v) {
			t.Skipf("the real kube-apiserver %s is not built: make real-binaries (or make test-real) builds it", v)
		}
	}
	return start(t, version, []string{nodestate.ControllerManager, nodestate.Scheduler})
}

// start is Start with the components of standins run by the stand-in.
func start(t *testing.T, version string, standins []string) *Cluster {
	t.Helper()
	tc := testbed.StartCluster(t, Nodes, testbed.Options{
		NoManifests: true,
		MutateNode: func(i int, st *nodestate.NodeState) {
			// The test bed's names node-j, kubeadm's fixtures cp-j. The
			// state's own member list is never rendered (no manifests).
			st.NodeName, st.Etcd.MemberName = NodeName(i), NodeName(i)
			st.Etcd.InitialCluster = strings.ReplaceAll(st.Etcd.InitialCluster, "node-", "cp-")
		},
	})
	c := &Cluster{Cluster: tc, Version: version}
	places := make([]Address, Nodes)
	for i, n := range tc.Nodes {
		places[i] = Address{IP: n.State.AdvertiseAddress, Ports: n.State.Ports}
	}
	moved := make([]*Kubeadm, Nodes)
	for i, n := range tc.Nodes {
		k, err := Compose(version, i+1)
		if err != nil {
			t.Fatal(err)
		}
		if moved[i], err = Move(k, Placement{Node: i + 1, Root: n.Root, Nodes: places}); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(n.Root, "kubeadm.yaml")
		if err := os.WriteFile(cfg, []byte(moved[i].Config), 0o600); err != nil {
			t.Fatal(err)
		}
		c.Configs = append(c.Configs, cfg)
		if err := mapImages(n, standins); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), Nodes*JoinTimeout)
	defer cancel()
	for i := range tc.Nodes {
		if err := c.join(ctx, i, moved[i]); err != nil {
			t.Fatalf("kubeadm cluster: %s: %v", NodeName(i+1), err)
		}
	}
	t.Logf("kubeadm cluster %s up: %s", version, strings.Join(c.Endpoints(), ", "))
	return c
}

// join writes node i's (0-based) manifests and waits until its components
// are active; for a node after the first, first adds its etcd member as a
// learner through the members before it, and promotes it once its etcd
// runs, retrying while the learner catches up, as kubeadm join does.
func (c *Cluster) join(ctx context.Context, i int, k *Kubeadm) error {
	n := c.Nodes[i]
	deadline := time.Now().Add(JoinTimeout)
	var cli *clientv3.Client
	var id uint64
	if i > 0 {
		tlsCfg, err := c.EtcdTLS()
		if err != nil {
			return err
		}
		cli, err = clientv3.New(clientv3.Config{Endpoints: c.Endpoints()[:i], TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return fmt.Errorf("etcd client: %w", err)
		}
		defer cli.Close()
		peer := testbed.EtcdURLAt(n.State.AdvertiseAddress, n.State.Ports.EtcdPeer)
		// etcd refuses a new member while it does not call the cluster
		// healthy (a member joined seconds ago); kubeadm retries too.
		err = retry(ctx, deadline, "add the etcd learner "+peer, func(ctx context.Context) error {
			resp, err := cli.MemberAddAsLearner(ctx, []string{peer})
			if err == nil {
				id = resp.Member.ID
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	for _, f := range Files {
		if err := os.WriteFile(filepath.Join(n.ManifestDir, f), []byte(k.Manifests[f]), 0o600); err != nil {
			return err
		}
	}
	src, err := adopt.ReadKubeadm(n.ManifestDir, "")
	if err != nil {
		return err
	}
	if n.State, _, err = adopt.Derive(src); err != nil {
		return err
	}
	if cli != nil {
		// A learner is promoted once it has caught up with the leader.
		err := retry(ctx, deadline, fmt.Sprintf("promote the etcd learner %x", id), func(ctx context.Context) error {
			_, err := cli.MemberPromote(ctx, id)
			return err
		})
		if err != nil {
			return err
		}
	}
	return n.WaitActive(ctx, time.Until(deadline))
}

// retry calls f (each call given 10 s) every 500 ms until it succeeds, and
// fails with its last error, saying what it tried, once deadline passed.
func retry(ctx context.Context, deadline time.Time, what string, f func(context.Context) error) error {
	for {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(fctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: not done by the deadline (%s per node): %w", what, JoinTimeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// mapImages maps, on node n, every kubebuild.Versions version's image of
// each of standins to the stand-in (the test bed maps a built version's
// images to the real binaries), and the etcd image of each version's
// kubeadm to the real etcd of its minor.
func mapImages(n *testbed.Node, standins []string) error {
	for _, v := range kubebuild.Versions {
		for _, comp := range standins {
			img := kubeletsim.Image{Binary: n.StandinBinary(comp), Env: map[string]string{standin.EnvEvents: n.EventsFile}}
			if err := n.MapImage(testbed.Repos[comp]+":"+v, img); err != nil {
				return err
			}
		}
		ref, err := EtcdImage(v)
		if err != nil {
			return err
		}
		if err := MapEtcd(n, ref); err != nil {
			return err
		}
	}
	return nil
}

// MapEtcd maps the etcd image ref on node n to the real etcd of its minor
// (registry.k8s.io/etcd:3.6.8-0 runs etcd 3.6).
func MapEtcd(n *testbed.Node, ref string) error {
	_, tag, ok := strings.Cut(ref, ":")
	parts := strings.SplitN(tag, ".", 3)
	if !ok || len(parts) < 2 {
		return fmt.Errorf("etcd image %q: no version tag", ref)
	}
	bin, err := etcdbuild.Binary(parts[0] + "." + parts[1])
	if err != nil {
		return err
	}
	return n.MapImage(ref, kubeletsim.Image{Binary: bin})
}

// UnmapImage removes ref from node n's image map: kubelet then cannot
// pull it (ErrImageNeverPull), as on a node that lacks the image and
// cannot reach its registry. The stand-in reads the map at every start.
func UnmapImage(n *testbed.Node, ref string) error {
	m, err := kubeletsim.LoadImageMap(n.ImageMapFile)
	if err != nil {
		return err
	}
	if _, ok := m[ref]; !ok {
		return fmt.Errorf("image map %s: %s is not mapped", n.ImageMapFile, ref)
	}
	delete(m, ref)
	tmp := n.ImageMapFile + ".new"
	if err := m.Save(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, n.ImageMapFile)
}

// EtcdImage is the etcd image kubeadm of version runs (its defaults
// fixture's).
func EtcdImage(version string) (string, error) {
	k, err := Compose(version, 1)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(k.Manifests["etcd.yaml"], "\n") {
		if ref, ok := strings.CutPrefix(strings.TrimSpace(line), "image: "); ok {
			return ref, nil
		}
	}
	return "", errors.New("kubeadm fixture " + version + ": etcd has no image")
}
