package testbed

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
)

// TestClusterNetNS brings up three nodes, node 3 in its own network
// namespace: the cluster forms across the veth, no member refuses a
// peer's connection, node 3's loopback
// listeners answer from here through the forwarders, Cut leaves the other
// two a quorum that commits while node 3 reaches nobody, Restore brings
// node 3 up to date, and the cleanup removes the namespace and the
// bridge.
func TestClusterNetNS(t *testing.T) {
	if err := NetNSSupported(); err != nil {
		t.Skipf("needs a network namespace (%v): make test as root, with iproute2", err)
	}
	ip, _ := exec.LookPath("ip")
	t.Cleanup(func() { // runs after the cluster's Stop
		if out, _ := exec.Command(ip, "netns", "list").Output(); strings.Contains(string(out), NetNSName) {
			t.Errorf("namespace %s left behind", NetNSName)
		}
		if exec.Command(ip, "link", "show", NetNSBridge).Run() == nil {
			t.Errorf("bridge %s left behind", NetNSBridge)
		}
	})
	c := StartCluster(t, 3, Options{NetNSNode: 3})
	for i, n := range c.Nodes {
		if n.State.AdvertiseAddress != NetNSAddress(i+1) {
			t.Errorf("node %d advertises %s, want %s", i+1, n.State.AdvertiseAddress, NetNSAddress(i+1))
		}
	}
	n3 := c.Nodes[2]
	if n3.NetNS() != NetNSName || c.Nodes[0].NetNS() != "" {
		t.Fatalf("namespaces %q, %q", c.Nodes[0].NetNS(), n3.NetNS())
	}
	if out, err := n3.Command(ip, "-br", "addr", "show", "dev", netnsPeer).CombinedOutput(); err != nil || !strings.Contains(string(out), NetNSAddress(3)) {
		t.Fatalf("inside the namespace: %v: %s", err, out)
	}
	if _, err := n3.Kubelet.Pods(context.Background()); err != nil {
		t.Fatal(err)
	}
	etcdclient.Put(t, c.Nodes[0], "/netns/before", "1")
	if v := etcdclient.Get(t, n3, "/netns/before"); v != "1" {
		t.Fatalf("node 3 reads %q, want 1", v)
	}

	if err := n3.Cut(); err != nil {
		t.Fatal(err)
	}
	// Nodes 1 and 2 keep quorum; when node 3 led, a write waits for
	// their election and may time out once ("possibly due to previous
	// leader failure").
	tlsCfg, err := c.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	one := etcdclient.New(t, c.Nodes[0])
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := one.Put(ctx, "/netns/cut", "2")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes 1 and 2 commit no write 30s after node 3 was cut off: %v", err)
		}
		t.Logf("put while node 3 is cut off: %v; again", err)
	}
	for _, ep := range []string{c.Endpoints()[2], n3.EtcdEndpoint()} {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: tlsCfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = cli.Get(ctx, "/netns/cut")
		cancel()
		cli.Close()
		if err == nil {
			t.Errorf("node 3's etcd at %s answered while cut off", ep)
		}
	}
	// Its kubelet stand-in still answers the test (dialled inside).
	if _, err := n3.Kubelet.Pods(context.Background()); err != nil {
		t.Errorf("kubelet stand-in while cut off: %v", err)
	}

	if err := n3.Restore(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n3.EtcdEndpoint()}, TLS: tlsCfg, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		r, err := cli.Get(ctx, "/netns/cut")
		cancel()
		cli.Close()
		if err == nil && len(r.Kvs) == 1 && string(r.Kvs[0].Value) == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 3 does not read the write made while it was cut off 30s after Restore: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.Nodes[0].Cut(); err == nil {
		t.Error("Cut of a node without a namespace: no error")
	}
	// Every member accepted every peer's connections: the nodes outside
	// the namespace connect from the bridge's first address, which their
	// certificates name.
	for _, n := range c.Nodes {
		logs, _ := filepath.Glob(filepath.Join(n.KubeletDir, "logs", "kube-system_etcd-*", "*.log"))
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				t.Fatal(err)
			}
			if i := strings.Index(string(b), "rejected connection on peer endpoint"); i >= 0 {
				t.Errorf("%s: %s", l, string(b)[i:min(len(b), i+400)])
			}
		}
	}
}
