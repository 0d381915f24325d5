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

// command is argv as kubeadm's ArgumentsToCommand (cmd/kubeadm/app/util)
// builds it: the binary, then the rendered flags of a that no extra arg
// replaces, sorted by name, then st's extra args of the component in
// their order (nodestate.ExtraArgList), each value of a flag given more
// than once as a --name=value of its own.
func command(st *nodestate.NodeState, name string, a args) []string {
	out := []string{binaryName(name)}
	extra := st.ExtraArgs[name]
	for _, k := range sortedKeys(a) {
		if _, replaced := extra[k]; !replaced {
			out = append(out, "--"+k+"="+a[k])
		}
	}
	for _, arg := range st.ExtraArgList(name) {
		out = append(out, "--"+arg.Name+"="+arg.Value)
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
// versions.Of), extra args applied. A flag given more than once has its
// last value here, the one a single-valued flag ends with (the probes and
// the flag checks read it); flagValues has every value.
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
		a[k] = v.Last()
	}
	return a
}

// flagValues is every value of flag on component name's command line:
// an extra arg's values in order, or the rendered value a gives (none when
// a has no such flag).
func flagValues(st *nodestate.NodeState, name string, a args, flag string) []string {
	if v, ok := st.ExtraArgs[name][flag]; ok {
		return v
	}
	if v, ok := a[flag]; ok {
		return []string{v}
	}
	return nil
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
	// kubeadm writes the state only to join an existing cluster; "new" is
	// etcd's default.
	if st.Etcd.InitialClusterState != "new" {
		a["initial-cluster-state"] = st.Etcd.InitialClusterState
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
		"service-account-issuer":             "https://kubernetes.default.svc." + st.Networking.DNSDomain,
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
		"authentication-kubeconfig":        kubeconfig,
		"authorization-kubeconfig":         kubeconfig,
		"bind-address":                     "127.0.0.1",
		"client-ca-file":                   pki(st, "ca.crt"),
		"cluster-name":                     "kubernetes",
		"cluster-signing-cert-file":        pki(st, "ca.crt"),
		"cluster-signing-key-file":         pki(st, "ca.key"),
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"kubeconfig":                       kubeconfig,
		"leader-elect":                     "true",
		"requestheader-client-ca-file":     pki(st, "front-proxy-ca.crt"),
		"root-ca-file":                     pki(st, "ca.crt"),
		"service-account-private-key-file": pki(st, "sa.key"),
		"use-service-account-credentials":  "true",
	}
	// kubeadm lets the controller-manager allocate node CIDRs only with a
	// pod subnet (without one the network plugin does it), and names the
	// Service range only then.
	if st.Networking.PodCIDR != nodestate.NoPodCIDR {
		a["allocate-node-cidrs"] = "true"
		a["cluster-cidr"] = st.Networking.PodCIDR
		a["service-cluster-ip-range"] = st.Networking.ServiceCIDR
	}
	setSecurePort(a, st.Ports.ControllerManager, nodestate.DefaultControllerManagerPort)
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
	}
	setSecurePort(a, st.Ports.Scheduler, nodestate.DefaultSchedulerPort)
	if st.Profile.Name == nodestate.ProfileCIS {
		a["profiling"] = "false"
	}
	return a
}

// setSecurePort sets --secure-port for a port other than the component's
// default, which kubeadm leaves to the component.
func setSecurePort(a args, port, def int) {
	if port != def {
		a["secure-port"] = strconv.Itoa(port)
	}
}

// checkArgs refuses a final flag set that component's binary at v would
// refuse to start with (versions.CheckArgs): a flag it does not know, or
// one etcd refuses beside another.
func checkArgs(st *nodestate.NodeState, name string, v *version.Version) error {
	if v == nil {
		return nil
	}
	a := componentArgs(st, name, v)
	// --feature-gates given more than once adds each value's gates to the
	// others' (component-base's feature gate flag), so the check sees
	// them all.
	if gates := flagValues(st, name, a, "feature-gates"); len(gates) > 1 {
		a["feature-gates"] = strings.Join(gates, ",")
	}
	return versions.CheckArgs(name, v, a)
}
