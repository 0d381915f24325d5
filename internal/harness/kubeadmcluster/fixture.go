// Package kubeadmcluster brings up a kubeadm-shaped stacked three-node
// control plane on the test bed (issue 26): on every node the static pods
// the real kubeadm writes (testdata/kubeadm, checked against kubeadm
// itself by make test-real), the first node as `kubeadm init` leaves it
// (its etcd keeps the single-entry --initial-cluster it was bootstrapped
// with), the others as `kubeadm join --control-plane` writes them (etcd
// with --initial-cluster-state=existing and the member list of the moment
// it joined), grown one member at a time as kubeadm grows it: the member
// added as a learner, its manifests written, the learner promoted.
//
// This file composes each node's manifests in kubeadm's own address space
// (cp-i at 10.0.0.1i, kubeadm's ports) and moves them onto a test bed node;
// cluster.go runs them.
package kubeadmcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Files are the manifests kubeadm writes on a stacked control-plane node.
var Files = []string{"etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"}

// The fixtures' kubeadm ports (kubeadm's constants; the fixtures used are
// written with the defaults).
const (
	kubeadmEtcdClient  = 2379
	kubeadmEtcdPeer    = 2380
	kubeadmEtcdMetrics = 2381
	kubeadmAPIServer   = 6443
)

// NodeName is the name kubeadm's node i (1-based) has: cp-i, the node and
// etcd member name of the fixtures.
func NodeName(i int) string { return "cp-" + strconv.Itoa(i) }

// kubeadmAddress is node i's advertise address in the fixtures: 10.0.0.1i.
func kubeadmAddress(i int) string { return "10.0.0.1" + strconv.Itoa(i) }

// Kubeadm is what kubeadm of one version wrote on node i of the cluster,
// in kubeadm's address space.
type Kubeadm struct {
	// Manifests are the static pods by file name (Files).
	Manifests map[string]string
	// Config is the kubeadm configuration (ClusterConfiguration and this
	// node's InitConfiguration) the node was made with.
	Config string
}

// Compose is what kubeadm of version writes on node i (1..3) of a stacked
// cluster, from the fixtures of testdata/kubeadm/<version>: node 1's etcd
// is `kubeadm init`'s (defaults: --initial-cluster=cp-1=... alone, no
// --initial-cluster-state), a later node's is `kubeadm join`'s for the
// i members the cluster has once it joined (joined: cp-3 of three,
// --initial-cluster-state=existing; kubeadm's GetEtcdPodSpec differs
// between joining nodes only in the name, the address and that list). The
// other components are the joined configuration's on every node (one
// ClusterConfiguration for the cluster: its pod subnet, its control-plane
// endpoint), at node i's address.
func Compose(version string, i int) (*Kubeadm, error) {
	if i < 1 || i > 3 {
		return nil, fmt.Errorf("kubeadm fixture: node %d: the fixtures describe nodes 1 to 3", i)
	}
	repo, err := build.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(repo, "testdata", "kubeadm", version)
	read := func(config, file string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, config, file))
		if err != nil {
			return "", fmt.Errorf("kubeadm fixture: %w", err)
		}
		return string(b), nil
	}
	// joined is cp-3 at 10.0.0.13; everything of it but etcd's member
	// list is the same on every joined node up to the name and address.
	renode := strings.NewReplacer(kubeadmAddress(3), kubeadmAddress(i), NodeName(3), NodeName(i))
	k := &Kubeadm{Manifests: map[string]string{}}
	for _, f := range Files[1:] {
		s, err := read("joined", filepath.Join("manifests", f))
		if err != nil {
			return nil, err
		}
		k.Manifests[f] = renode.Replace(s)
	}
	if k.Config, err = read("joined", "kubeadm.yaml"); err != nil {
		return nil, err
	}
	k.Config = renode.Replace(k.Config)
	if i == 1 {
		etcd, err := read("defaults", "manifests/etcd.yaml")
		if err != nil {
			return nil, err
		}
		if want := "- --initial-cluster=" + member(1) + "\n"; !strings.Contains(etcd, want) || strings.Contains(etcd, "--initial-cluster-state") {
			return nil, fmt.Errorf("kubeadm fixture %s/defaults: etcd is not kubeadm init's single member (%q, no --initial-cluster-state)", version, want)
		}
		k.Manifests["etcd.yaml"] = etcd
		return k, nil
	}
	etcd, err := read("joined", "manifests/etcd.yaml")
	if err != nil {
		return nil, err
	}
	members := make([]string, i)
	for j := range members {
		members[j] = member(j + 1)
	}
	line := regexp.MustCompile(`(?m)^(\s*- --initial-cluster=).*$`)
	if len(line.FindAllString(etcd, -1)) != 1 || !strings.Contains(etcd, "- --initial-cluster-state=existing\n") {
		return nil, fmt.Errorf("kubeadm fixture %s/joined: etcd is not kubeadm join's (one --initial-cluster, --initial-cluster-state=existing)", version)
	}
	etcd = line.ReplaceAllString(renode.Replace(etcd), "${1}"+strings.Join(members, ","))
	k.Manifests["etcd.yaml"] = etcd
	return k, nil
}

// member is node i's --initial-cluster entry in kubeadm's address space.
func member(i int) string {
	return NodeName(i) + "=https://" + kubeadmAddress(i) + ":" + strconv.Itoa(kubeadmEtcdPeer)
}

// Placement is where the test bed runs node i of the cluster: its root
// (kubeadm's directories live under it), its advertise address (a
// loopback address) and its free ports, and every node's address and
// ports (etcd's member list names its peers).
type Placement struct {
	Node  int
	Root  string
	Nodes []Address
}

// Address is a node's test bed address and ports.
type Address struct {
	IP    string
	Ports nodestate.Ports
}

// Move rewrites k (node p.Node's) onto the test bed, and changes nothing
// else of the pods:
//
//   - kubeadm's directories (/etc/kubernetes, /var/lib/etcd) are prefixed
//     with the root, where the test bed wrote kubeadm's PKI and
//     kubeconfigs;
//   - every node's address 10.0.0.1j becomes its test bed address, and the
//     ports kubeadm gives etcd (2379, 2380, 2381) and kube-apiserver (6443)
//     the node's free ones, in every URL, host:port and containerPort;
//   - three nodes on one host cannot each listen on 127.0.0.1:10257 and
//     :10259, so kube-controller-manager and kube-scheduler get the
//     node's own loopback address, as kubeadm writes a bind-address
//     extraArg: the default --bind-address=127.0.0.1 dropped, the new one
//     after the sorted flags, the probes' host with it (compare
//     testdata/kubeadm/*/extra-args);
//   - kube-apiserver gets --endpoint-reconciler-type=none, as kubeadm
//     writes an apiServer extraArg (after the sorted flags): v1.37 refuses
//     to reconcile a loopback advertise address, as testbed.Options.Real
//     says;
//   - kubeadm's configuration says where the moved node runs what it
//     leaves to kubeadm's defaults (PinMoved).
//
// It fails when anything of kubeadm's address space is left.
func Move(k *Kubeadm, p Placement) (*Kubeadm, error) {
	if p.Node < 1 || p.Node > len(p.Nodes) {
		return nil, fmt.Errorf("kubeadm move: node %d of %d", p.Node, len(p.Nodes))
	}
	self := p.Nodes[p.Node-1]
	var pairs []string
	hostPort := func(ip string, port int) string { return ip + ":" + strconv.Itoa(port) }
	for j, n := range p.Nodes {
		from := kubeadmAddress(j + 1)
		pairs = append(pairs,
			hostPort(from, kubeadmEtcdPeer), hostPort(n.IP, n.Ports.EtcdPeer),
			hostPort(from, kubeadmEtcdClient), hostPort(n.IP, n.Ports.EtcdClient),
			hostPort(from, kubeadmAPIServer), hostPort(n.IP, n.Ports.APIServer))
	}
	pairs = append(pairs,
		hostPort("127.0.0.1", kubeadmEtcdClient), hostPort("127.0.0.1", self.Ports.EtcdClient),
		hostPort("127.0.0.1", kubeadmEtcdMetrics), hostPort("127.0.0.1", self.Ports.EtcdMetrics),
		"--secure-port="+strconv.Itoa(kubeadmAPIServer), "--secure-port="+strconv.Itoa(self.Ports.APIServer),
		"containerPort: "+strconv.Itoa(kubeadmAPIServer), "containerPort: "+strconv.Itoa(self.Ports.APIServer),
		"containerPort: "+strconv.Itoa(kubeadmEtcdMetrics), "containerPort: "+strconv.Itoa(self.Ports.EtcdMetrics))
	for j, n := range p.Nodes {
		pairs = append(pairs, kubeadmAddress(j+1), n.IP)
	}
	for _, d := range []string{"/etc/kubernetes", "/var/lib/etcd"} {
		pairs = append(pairs, "="+d, "="+p.Root+d, ": "+d, ": "+p.Root+d)
	}
	mv := strings.NewReplacer(pairs...)
	cfg, err := PinMoved(mv.Replace(k.Config), p.Root+"/etc/kubernetes/pki", p.Root+"/var/lib/etcd", self.Ports.APIServer)
	if err != nil {
		return nil, fmt.Errorf("kubeadm move: %w", err)
	}
	out := &Kubeadm{Manifests: map[string]string{}, Config: cfg}
	for f, s := range k.Manifests {
		s = mv.Replace(s)
		var err error
		switch f {
		case "kube-apiserver.yaml":
			s, err = appendFlag(s, "--endpoint-reconciler-type=none")
		case "kube-controller-manager.yaml", "kube-scheduler.yaml":
			s, err = rebind(s, self.IP)
		}
		if err != nil {
			return nil, fmt.Errorf("kubeadm move %s: %w", f, err)
		}
		if strings.Contains(s, "10.0.0.") {
			return nil, fmt.Errorf("kubeadm move %s: an address of kubeadm's is left:\n%s", f, s)
		}
		for _, port := range []int{kubeadmEtcdClient, kubeadmEtcdPeer, kubeadmEtcdMetrics, kubeadmAPIServer} {
			if regexp.MustCompile(`[:= ]` + strconv.Itoa(port) + `\b`).MatchString(s) {
				return nil, fmt.Errorf("kubeadm move %s: kubeadm's port %d is left:\n%s", f, port, s)
			}
		}
		out.Manifests[f] = s
	}
	return out, nil
}

// appendFlag puts flag after the container's last flag, where kubeadm
// writes an extraArg that is none of its own.
func appendFlag(s, flag string) (string, error) {
	i := strings.Index(s, "\n    image: ")
	if i < 0 {
		return "", fmt.Errorf("no container image line to put %s before", flag)
	}
	return s[:i] + "\n    - " + flag + s[i:], nil
}

// rebind is kubeadm's pod with a bind-address extraArg of ip: its default
// --bind-address=127.0.0.1 removed, the new one appended, and the probes
// (whose host kubeadm takes from the bind address) at ip.
func rebind(s, ip string) (string, error) {
	const def = "    - --bind-address=127.0.0.1\n"
	if strings.Count(s, def) != 1 || !strings.Contains(s, "host: 127.0.0.1\n") {
		return "", fmt.Errorf("not kubeadm's default listener (%q and probes on 127.0.0.1)", strings.TrimSpace(def))
	}
	s = strings.Replace(s, def, "", 1)
	s = strings.ReplaceAll(s, "host: 127.0.0.1\n", "host: "+ip+"\n")
	return appendFlag(s, "--bind-address="+ip)
}
