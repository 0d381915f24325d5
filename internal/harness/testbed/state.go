package testbed

// This file prepares a node's state: the state file rewritten into the root, free ports and kubeconfigs.

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// member is what StartClusterContext decides for one node before its state
// is written: its number, address, ports and the cluster's etcd
// membership. A single node (StartNode) has none.
type member struct {
	number         int // 1..n: node-<number>
	address        string
	ports          nodestate.Ports
	initialCluster string
	cas            *CAs
	netns          *netns // Options.NetNSNode's node only
	// also are more IP SANs of the node's certificates (IssueNode).
	also []string
}

// name is the member's node name and etcd member name.
func (m *member) name() string { return "node-" + strconv.Itoa(m.number) }

// prepareState loads the state file and rewrites it to run inside the
// root: as a single-member node at 127.0.0.1 on new free ports, or with
// m, as member m of a cluster.
func (n *Node) prepareState(opts Options, m *member) (*nodestate.NodeState, error) {
	path := opts.StateFile
	if path == "" {
		path = "testdata/states/default.yaml"
	}
	if !filepath.IsAbs(path) {
		repo, err := build.RepoRoot()
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
	if m != nil {
		st.AdvertiseAddress = m.address
		st.NodeName, st.Etcd.MemberName = m.name(), m.name()
	}
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
		repo, err := build.RepoRoot()
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
	if m != nil {
		st.Ports, st.Etcd.InitialCluster = m.ports, m.initialCluster
	} else {
		ports, err := FreePorts(portsPerNode)
		if err != nil {
			return nil, err
		}
		st.Ports = nodePorts(ports)
		st.Etcd.InitialCluster = st.Etcd.MemberName + "=" + EtcdURLAt(st.AdvertiseAddress, st.Ports.EtcdPeer)
	}
	st.Etcd.InitialClusterState = "new"
	if opts.Real {
		st.SetExtraArg(nodestate.KubeAPIServer, "endpoint-reconciler-type", "none")
	}
	if opts.Mutate != nil {
		opts.Mutate(st)
	}
	if opts.MutateNode != nil && m != nil {
		opts.MutateNode(m.number, st)
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

// portsPerNode is how many ports a node takes: nodePorts' order.
const portsPerNode = 6

// nodePorts assigns portsPerNode free ports to a node's listeners.
func nodePorts(p []int) nodestate.Ports {
	return nodestate.Ports{EtcdClient: p[0], EtcdPeer: p[1], EtcdMetrics: p[2], APIServer: p[3], ControllerManager: p[4], Scheduler: p[5]}
}

// kubeconfigClients are the kubeconfigs WriteKubeconfigs writes, each with
// the client certificate (GeneratePKI's name) it authenticates with.
var kubeconfigClients = map[string]string{
	"admin.conf":              "admin",
	"controller-manager.conf": "controller-manager",
	"scheduler.conf":          "scheduler",
}

// WriteKubeconfigs writes kubeadm's admin, controller-manager and scheduler
// kubeconfigs for the node's apiserver into st.KubeconfigDir, each carrying
// its client certificate (GeneratePKI's), so that a real controller-manager
// and scheduler authenticate (the stand-ins read none of it). As kubeadm
// does, the CA, the certificate and the key are embedded (*-data): the
// rendered scheduler pod mounts only scheduler.conf, so under a real
// container runtime a kubeconfig naming files in the PKI directory could
// not be read. The end-to-end node (package e2e) writes its kubeconfigs
// with it too.
func WriteKubeconfigs(st *nodestate.NodeState) error {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(st.PKIDir, name))
		if err != nil {
			return "", fmt.Errorf("testbed kubeconfig: %w", err)
		}
		return base64.StdEncoding.EncodeToString(b), nil
	}
	ca, err := read("ca.crt")
	if err != nil {
		return err
	}
	for name, cert := range kubeconfigClients {
		crt, err := read(cert + ".crt")
		if err != nil {
			return err
		}
		key, err := read(cert + ".key")
		if err != nil {
			return err
		}
		b := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: kubernetes\n  cluster:\n    server: https://%s\n    certificate-authority-data: %s\ncontexts:\n- name: default\n  context: {cluster: kubernetes, user: default}\ncurrent-context: default\nusers:\n- name: default\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n",
			net.JoinHostPort(st.AdvertiseAddress, strconv.Itoa(st.Ports.APIServer)), ca, crt, key)
		if err := os.WriteFile(filepath.Join(st.KubeconfigDir, name), []byte(b), 0o600); err != nil {
			return fmt.Errorf("testbed kubeconfig: %w", err)
		}
	}
	return nil
}
