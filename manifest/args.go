package manifest

import (
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// cisTLSCipherSuites is the CIS benchmark's strong cipher list (1.2.x).
var cisTLSCipherSuites = strings.Join([]string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
}, ",")

// args is a flag set built by a component's renderer.
type args map[string]string

// command is argv: binary then every flag of a (extra args already
// applied) as --name=value, sorted by name like kubeadm's ArgumentsToCommand.
func command(name string, a args) []string {
	out := []string{binaryName(name)}
	for _, k := range sortedKeys(a) {
		out = append(out, "--"+k+"="+a[k])
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// componentArgs is the final flag set of a component at version v (see
// versions.Of), extra args applied.
func componentArgs(st *nodestate.NodeState, name string, v *version.Version) args {
	var a args
	switch name {
	case nodestate.Etcd:
		a = etcdArgs(st, v)
	case nodestate.KubeAPIServer:
		a = apiServerArgs(st)
	case nodestate.ControllerManager:
		a = controllerManagerArgs(st)
	case nodestate.Scheduler:
		a = schedulerArgs(st)
	default:
		return args{}
	}
	for k, v := range st.ExtraArgs[name] {
		a[k] = v
	}
	return a
}

func loopback(st *nodestate.NodeState) string {
	if ip := net.ParseIP(st.AdvertiseAddress); ip != nil && ip.To4() == nil {
		return "::1"
	}
	return "127.0.0.1"
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func pki(st *nodestate.NodeState, name string) string { return filepath.Join(st.PKIDir, name) }

func etcdClientURL(st *nodestate.NodeState) string {
	return "https://" + hostPort(st.AdvertiseAddress, st.Ports.EtcdClient)
}

func etcdPeerURL(st *nodestate.NodeState) string {
	return "https://" + hostPort(st.AdvertiseAddress, st.Ports.EtcdPeer)
}

func etcdArgs(st *nodestate.NodeState, v *version.Version) args {
	lo := loopback(st)
	listenClient := "https://" + hostPort(lo, st.Ports.EtcdClient)
	if st.AdvertiseAddress != lo {
		listenClient += "," + etcdClientURL(st)
	}
	a := args{
		"name":                        st.Etcd.MemberName,
		"advertise-client-urls":       etcdClientURL(st),
		"listen-client-urls":          listenClient,
		"listen-peer-urls":            etcdPeerURL(st),
		"initial-advertise-peer-urls": etcdPeerURL(st),
		"initial-cluster":             st.Etcd.InitialCluster,
		"initial-cluster-state":       st.Etcd.InitialClusterState,
		"data-dir":                    st.Etcd.DataDir,
		"cert-file":                   pki(st, "etcd/server.crt"),
		"key-file":                    pki(st, "etcd/server.key"),
		"trusted-ca-file":             pki(st, "etcd/ca.crt"),
		"client-cert-auth":            "true",
		"peer-cert-file":              pki(st, "etcd/peer.crt"),
		"peer-key-file":               pki(st, "etcd/peer.key"),
		"peer-trusted-ca-file":        pki(st, "etcd/ca.crt"),
		"peer-client-cert-auth":       "true",
		"snapshot-count":              "10000",
		"listen-metrics-urls":         "http://" + hostPort(lo, st.Ports.EtcdMetrics),
	}
	// The flags whose names depend on etcd's minor (3.7 refuses 3.5's).
	for k, val := range versions.Etcd(v).Flags {
		a[k] = val
	}
	return a
}

func apiServerArgs(st *nodestate.NodeState) args {
	a := args{
		"advertise-address":                  st.AdvertiseAddress,
		"allow-privileged":                   "true",
		"authorization-mode":                 "Node,RBAC",
		"client-ca-file":                     pki(st, "ca.crt"),
		"enable-admission-plugins":           "NodeRestriction",
		"enable-bootstrap-token-auth":        "true",
		"etcd-cafile":                        pki(st, "etcd/ca.crt"),
		"etcd-certfile":                      pki(st, "apiserver-etcd-client.crt"),
		"etcd-keyfile":                       pki(st, "apiserver-etcd-client.key"),
		"etcd-servers":                       "https://" + hostPort(loopback(st), st.Ports.EtcdClient),
		"kubelet-client-certificate":         pki(st, "apiserver-kubelet-client.crt"),
		"kubelet-client-key":                 pki(st, "apiserver-kubelet-client.key"),
		"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
		"proxy-client-cert-file":             pki(st, "front-proxy-client.crt"),
		"proxy-client-key-file":              pki(st, "front-proxy-client.key"),
		"requestheader-allowed-names":        "front-proxy-client",
		"requestheader-client-ca-file":       pki(st, "front-proxy-ca.crt"),
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"secure-port":                        strconv.Itoa(st.Ports.APIServer),
		"service-account-issuer":             "https://kubernetes.default.svc.cluster.local",
		"service-account-key-file":           pki(st, "sa.pub"),
		"service-account-signing-key-file":   pki(st, "sa.key"),
		"service-cluster-ip-range":           st.Networking.ServiceCIDR,
		"tls-cert-file":                      pki(st, "apiserver.crt"),
		"tls-private-key-file":               pki(st, "apiserver.key"),
	}
	if st.Profile.Name == nodestate.ProfileCIS {
		a["audit-policy-file"] = st.Profile.AuditPolicyFile
		a["audit-log-path"] = filepath.Join(st.Profile.AuditLogDir, "audit.log")
		a["audit-log-maxage"] = "30"
		a["audit-log-maxbackup"] = "10"
		a["audit-log-maxsize"] = "100"
		a["enable-admission-plugins"] = "NodeRestriction,EventRateLimit,PodSecurity"
		a["admission-control-config-file"] = admissionConfigPath(st)
		a["profiling"] = "false"
		a["tls-cipher-suites"] = cisTLSCipherSuites
	}
	return a
}

func controllerManagerArgs(st *nodestate.NodeState) args {
	kubeconfig := filepath.Join(st.KubeconfigDir, "controller-manager.conf")
	a := args{
		"allocate-node-cidrs":              "true",
		"authentication-kubeconfig":        kubeconfig,
		"authorization-kubeconfig":         kubeconfig,
		"bind-address":                     "127.0.0.1",
		"client-ca-file":                   pki(st, "ca.crt"),
		"cluster-cidr":                     st.Networking.PodCIDR,
		"cluster-name":                     "kubernetes",
		"cluster-signing-cert-file":        pki(st, "ca.crt"),
		"cluster-signing-key-file":         pki(st, "ca.key"),
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"kubeconfig":                       kubeconfig,
		"leader-elect":                     "true",
		"requestheader-client-ca-file":     pki(st, "front-proxy-ca.crt"),
		"root-ca-file":                     pki(st, "ca.crt"),
		"secure-port":                      strconv.Itoa(st.Ports.ControllerManager),
		"service-account-private-key-file": pki(st, "sa.key"),
		"service-cluster-ip-range":         st.Networking.ServiceCIDR,
		"use-service-account-credentials":  "true",
	}
	if st.Profile.Name == nodestate.ProfileCIS {
		a["profiling"] = "false"
	}
	return a
}

func schedulerArgs(st *nodestate.NodeState) args {
	kubeconfig := filepath.Join(st.KubeconfigDir, "scheduler.conf")
	a := args{
		"authentication-kubeconfig": kubeconfig,
		"authorization-kubeconfig":  kubeconfig,
		"bind-address":              "127.0.0.1",
		"kubeconfig":                kubeconfig,
		"leader-elect":              "true",
		"secure-port":               strconv.Itoa(st.Ports.Scheduler),
	}
	if st.Profile.Name == nodestate.ProfileCIS {
		a["profiling"] = "false"
	}
	return a
}

// checkArgs refuses a final flag set that component's binary at v would
// refuse to start with (versions.CheckArgs): a flag it does not know, or
// one etcd refuses beside another.
func checkArgs(st *nodestate.NodeState, name string, v *version.Version) error {
	if v == nil {
		return nil
	}
	return versions.CheckArgs(name, v, componentArgs(st, name, v))
}
