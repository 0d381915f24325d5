// Package nodestate is the persisted description of one control-plane node:
// the single input every static pod manifest is rendered from.
//
// A NodeState is loaded from YAML with strict decoding (an unknown field or a
// value of the wrong type is an error naming the file and the field path),
// validated (every error names the field), and saved atomically and durably.
package nodestate

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/durable"
)

// APIVersion and Kind identify a node state document.
const (
	APIVersion = "stratum.ciq.com/v1"
	Kind       = "NodeState"
)

// Component names, in start order. They are the keys of Images and ExtraArgs.
const (
	Etcd              = "etcd"
	KubeAPIServer     = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	KubeVIP           = "kube-vip"
)

// Components is every component a node state can describe, in start order.
// Callers must not modify it; use manifest.NamesFor for a node's roster.
var Components = []string{Etcd, KubeAPIServer, ControllerManager, Scheduler, KubeVIP}

// Profiles a node can run.
const (
	ProfileDefault = "default"
	ProfileCIS     = "cis"
)

// NodeState is everything the manifests of one control-plane node are
// rendered from. The zero value is not valid; use Load or Parse.
type NodeState struct {
	// APIVersion is the schema of the document: stratum.ciq.com/v1.
	APIVersion string `json:"apiVersion"`
	// Kind says the document is a node state: NodeState.
	Kind string `json:"kind"`

	// NodeName is the kubelet's node name; static pod names get it as suffix
	// (etcd-cp-1), and kube-vip announces under it.
	NodeName string `json:"nodeName"`
	// AdvertiseAddress is the IP the apiserver advertises and etcd's peers
	// and clients use; etcd listens on it and on the loopback address.
	AdvertiseAddress string `json:"advertiseAddress"`
	// KubernetesVersion is the control plane's version, e.g. v1.34.4. A
	// Kubernetes component whose image tag is not a version runs at it.
	KubernetesVersion string `json:"kubernetesVersion"`
	// ImageRepository is where the images a component does not pin come
	// from, with kubeadm's meaning: a Kubernetes component's image is
	// <imageRepository>/<component>:<kubernetesVersion>, etcd's
	// <imageRepository>/etcd:<the etcd version kubeadm pairs with that
	// minor> (versions/kubeadm). Empty means registry.k8s.io.
	ImageRepository string `json:"imageRepository,omitempty"`
	// Images pins the image reference of a component, overriding
	// imageRepository: etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, and kube-vip (always pinned: kubeadm has no kube-vip
	// image) when vip is set. A digest-pinned reference (name@sha256:...)
	// is allowed.
	Images map[string]string `json:"images,omitempty"`
	// Versions gives a component's version where its image tag does not
	// (an image pinned by digest alone, or a tag that is no version):
	// "3.6.16" for etcd, "v1.36.3" for the Kubernetes components. With a
	// version tag too, the two must agree. docs/versions.md says where each
	// component's version comes from.
	Versions map[string]string `json:"versions,omitempty"`

	// Etcd is the local etcd member: its name, the cluster it belongs to
	// and its data directory.
	Etcd EtcdMember `json:"etcd"`
	// VIP is optional: with it the node also runs kube-vip.
	VIP *VIP `json:"vip,omitempty"`

	// Profile selects the hardening the manifests are rendered with.
	Profile Profile `json:"profile"`

	// PKIDir holds the cluster's certificates and keys in kubeadm's layout
	// (ca.crt, etcd/server.crt, ...; /etc/kubernetes/pki).
	PKIDir string `json:"pkiDir"`
	// KubeconfigDir holds controller-manager.conf, scheduler.conf and
	// admin.conf (/etc/kubernetes).
	KubeconfigDir string `json:"kubeconfigDir"`
	// ConfigDir receives the render-derived files (the merged admission
	// configuration); kube-apiserver's argv names it. Outside the manifest dir.
	ConfigDir string `json:"configDir"`

	// CACertDirs are the host's CA certificate directories mounted
	// read-only into kube-apiserver and kube-controller-manager beside
	// /etc/ssl/certs, which is always mounted (the files there are often
	// symlinks into them). kubeadm mounts those of /etc/pki/ca-trust,
	// /etc/pki/tls/certs, /etc/ca-certificates, /usr/share/ca-certificates
	// and /usr/local/share/ca-certificates that exist on the host when it
	// writes the manifests; init --from-kubeadm records the ones it
	// mounted. Empty means DefaultCACertDirs.
	CACertDirs []string `json:"caCertDirs,omitempty"`

	// Networking holds the cluster's Service and pod address ranges.
	Networking Networking `json:"networking"`
	// Ports are the node-local ports the components listen on.
	Ports Ports `json:"ports"`

	// ExtraArgs are extra --flag=value arguments per component. A key that
	// the renderer also sets replaces the rendered value, except etcd's
	// flags that come from the etcd, ports and pkiDir fields. A flag the
	// component's binary at its version does not accept is refused. The
	// value is a string, or a list of strings for a flag given more than
	// once (each value is written as --flag=value, in the list's order):
	// two --service-account-issuer keep an old issuer accepted while
	// tokens rotate.
	ExtraArgs map[string]map[string]ArgValues `json:"extraArgs,omitempty"`
	// ExtraArgsOrder gives, per component, the order of its extra args on
	// the command line, which follow the rendered flags as kubeadm puts
	// them (an extra arg that replaces a rendered flag moves there too).
	// A flag with several values is listed once (its values together) or
	// once per value (each place takes the next value). Extra args it does
	// not list follow the listed ones, sorted by name. init --from-kubeadm
	// records kubeadm's order, which kubelet sees.
	ExtraArgsOrder map[string][]string `json:"extraArgsOrder,omitempty"`

	// Stopped lists the components `stratum-upgrade stop` stopped, in
	// roster order: each is in the roster (it keeps its image and
	// arguments) but has no manifest, and every render leaves it out
	// (manifest.NamesFor) until `stratum-upgrade start` takes it off. So
	// a stop survives render, resume and reboots. Set by the stop and
	// start transactions; apply --state refuses to change it.
	Stopped []string `json:"stopped,omitempty"`

	// AdoptedInputs is set by `init --from-kubeadm`: per component, the
	// digest of its start-only input files when the node was adopted. The
	// manifests another tool wrote carry no stratum.ciq.com/inputs-sha256
	// annotation, and adding one would make kubelet restart the component,
	// so while a component's files still hash to this digest its pod is
	// rendered without the annotation. Once they change, the annotation
	// appears and the component restarts to read them, as on any node.
	AdoptedInputs map[string]string `json:"adoptedInputs,omitempty"`

	// ExtraVolumes are hostPath volumes mounted into one component's pod
	// beside the rendered ones, as kubeadm's extraVolumes
	// (apiServer.extraVolumes, ...): only that component mounts them. A
	// volume named as a rendered one replaces it, as in kubeadm.
	ExtraVolumes map[string][]HostPathMount `json:"extraVolumes,omitempty"`
	// ExtraEnvs are environment variables of one component's container, as
	// kubeadm's extraEnvs; the container's env is sorted by name, as
	// kubeadm writes it.
	ExtraEnvs map[string][]EnvVar `json:"extraEnvs,omitempty"`
	// Resources replaces a component's rendered resources (kubeadm's
	// requests: etcd cpu 100m and memory 100Mi, kube-apiserver cpu 250m,
	// kube-controller-manager cpu 200m, kube-scheduler cpu 100m).
	Resources map[string]Resources `json:"resources,omitempty"`
	// Patches are kubeadm patches applied to the rendered pods, for any pod
	// field the other fields do not carry.
	Patches *Patches `json:"patches,omitempty"`
}

// EtcdMember is the local etcd member's identity and cluster membership.
type EtcdMember struct {
	// MemberName is the member's name (etcd's --name); initialCluster
	// must list it.
	MemberName string `json:"memberName"`
	// InitialCluster is etcd's --initial-cluster: name=peerURL,...
	InitialCluster string `json:"initialCluster"`
	// InitialClusterState is "new" or "existing".
	InitialClusterState string `json:"initialClusterState"`
	// DataDir is etcd's data directory (--data-dir), mounted into the etcd
	// pod. On a single-member cluster, the rollback of an etcd upgrade
	// restores it from the etcd snapshot taken before the upgrade.
	DataDir string `json:"dataDir"`
	// TerminationGracePeriodSeconds, when set, is the etcd pod's
	// terminationGracePeriodSeconds: how long kubelet waits between SIGTERM
	// and SIGKILL when the pod is removed. Unset, the pod carries none, as
	// kubeadm's does (kubelet's default, 30 s). etcd closes its client
	// server first and waits for open watches up to its request timeout
	// (7 s at kubeadm's flags) before it stops; a kill is a crash etcd
	// recovers from without losing an acknowledged write (every entry is
	// fsynced to the WAL before it is acknowledged). run --to sets 2 (see
	// engine.Release.Apply). Kubelet never waits less than 2 s.
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// VIP is the virtual IP kube-vip announces for the apiserver.
type VIP struct {
	// Address is the virtual IP; it must not be the advertiseAddress.
	Address string `json:"address"`
	// Interface is the network interface kube-vip announces the address on.
	Interface string `json:"interface"`
}

// Profile selects hardening. The cis profile needs both files; they are
// read at render time, so a changed file is noticed by the next render.
type Profile struct {
	// Name is "default" (kubeadm's flags) or "cis" (the CIS Kubernetes
	// Benchmark's: audit logging, the EventRateLimit and PodSecurity
	// admission plugins, no profiling, strong TLS ciphers).
	Name string `json:"name"`
	// AuditPolicyFile is kube-apiserver's audit policy (an audit.k8s.io/v1
	// Policy; --audit-policy-file), mounted into its pod.
	AuditPolicyFile string `json:"auditPolicyFile,omitempty"`
	// AdmissionConfigFile is an apiserver.config.k8s.io AdmissionConfiguration;
	// it is merged over the profile's built-in plugin configuration.
	AdmissionConfigFile string `json:"admissionConfigFile,omitempty"`
	// AuditLogDir receives kube-apiserver's audit log (audit.log in it).
	AuditLogDir string `json:"auditLogDir,omitempty"`
}

// Networking holds the cluster's address ranges.
type Networking struct {
	// ServiceCIDR is the Services' virtual IP range
	// (--service-cluster-ip-range of kube-apiserver and
	// kube-controller-manager).
	ServiceCIDR string `json:"serviceCIDR"`
	// PodCIDR is the pod network's range (kube-controller-manager's
	// --cluster-cidr, with --allocate-node-cidrs and the Service range),
	// or NoPodCIDR ("none"): the controller-manager allocates no node
	// CIDRs, the network plugin does (kubeadm without a podSubnet).
	PodCIDR string `json:"podCIDR"`
	// DNSDomain is the cluster's DNS domain (kubeadm's
	// networking.dnsDomain); the service account issuer is
	// https://kubernetes.default.svc.<dnsDomain>.
	DNSDomain string `json:"dnsDomain,omitempty"`
}

// Ports are the node-local ports the components listen on. Zero means the
// upstream default (see Default*Port).
type Ports struct {
	// EtcdClient is etcd's client port.
	EtcdClient int `json:"etcdClient,omitempty"`
	// EtcdPeer is etcd's peer port.
	EtcdPeer int `json:"etcdPeer,omitempty"`
	// EtcdMetrics is etcd's metrics and health port (plain HTTP on the
	// loopback address; the probes use it).
	EtcdMetrics int `json:"etcdMetrics,omitempty"`
	// APIServer is kube-apiserver's secure port.
	APIServer int `json:"apiServer,omitempty"`
	// ControllerManager is kube-controller-manager's secure port.
	ControllerManager int `json:"controllerManager,omitempty"`
	// Scheduler is kube-scheduler's secure port.
	Scheduler int `json:"scheduler,omitempty"`
}

// Upstream default ports, the ones kubeadm renders.
const (
	DefaultEtcdClientPort        = 2379
	DefaultEtcdPeerPort          = 2380
	DefaultEtcdMetricsPort       = 2381
	DefaultAPIServerPort         = 6443
	DefaultControllerManagerPort = 10257
	DefaultSchedulerPort         = 10259
)

// DefaultCACertDirs are the CA certificate directories mounted when the
// node state names none (CACertDirs): those of the Debian and RHEL
// families, mounted DirectoryOrCreate, so one render serves both.
var DefaultCACertDirs = []string{"/etc/ca-certificates", "/etc/pki", "/usr/local/share/ca-certificates", "/usr/share/ca-certificates"}

// CACertMountDirs is st.CACertDirs, or DefaultCACertDirs when it is empty.
func (st *NodeState) CACertMountDirs() []string {
	if len(st.CACertDirs) > 0 {
		return st.CACertDirs
	}
	return DefaultCACertDirs
}

// Defaults applied by Parse to empty optional fields.
const (
	DefaultPKIDir        = "/etc/kubernetes/pki"
	DefaultKubeconfigDir = "/etc/kubernetes"
	DefaultConfigDir     = "/etc/kubernetes/stratum"
	DefaultAuditLogDir   = "/var/log/kubernetes/audit"
	DefaultEtcdDataDir   = "/var/lib/etcd"
	DefaultServiceCIDR   = "10.96.0.0/12"
	DefaultPodCIDR       = "10.244.0.0/16"
	DefaultDNSDomain     = "cluster.local"
	// NoPodCIDR as networking.podCIDR: no pod range for the
	// controller-manager to allocate node CIDRs from.
	NoPodCIDR = "none"
)

// Load reads, strictly decodes, defaults and validates the node state at
// path, and captures the files of patches.directory into patches.files
// (Patches). Every error names path and, where one is at fault, the field
// path.
func Load(path string) (*NodeState, error) {
	b, err := durable.ReadInput(path) // bounded: 1 MiB
	if err != nil {
		return nil, fmt.Errorf("node state %s: %w", path, err)
	}
	st, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("node state %s: %w", path, err)
	}
	if err := st.capturePatches(); err != nil {
		return nil, fmt.Errorf("node state %s: %w", path, err)
	}
	return st, nil
}

// Parse strictly decodes, defaults and validates a node state document.
func Parse(b []byte) (*NodeState, error) {
	var st NodeState
	if err := DecodeStrict(b, Kind, &st); err != nil {
		return nil, err
	}
	st.applyDefaults()
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return &st, nil
}

// cleanYAMLError turns the json decoder's Go-type wording into field paths.
func cleanYAMLError(err error) error {
	msg := err.Error()
	msg = strings.ReplaceAll(msg, "error unmarshaling JSON: while decoding JSON: ", "")
	msg = strings.ReplaceAll(msg, "json: ", "")
	msg = strings.ReplaceAll(msg, "Go struct field NodeState.", "field ")
	return errors.New(msg)
}

func (st *NodeState) applyDefaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&st.PKIDir, DefaultPKIDir)
	def(&st.KubeconfigDir, DefaultKubeconfigDir)
	def(&st.ConfigDir, DefaultConfigDir)
	def(&st.Etcd.DataDir, DefaultEtcdDataDir)
	def(&st.Etcd.MemberName, st.NodeName)
	def(&st.Etcd.InitialClusterState, "new")
	def(&st.Networking.ServiceCIDR, DefaultServiceCIDR)
	def(&st.Networking.PodCIDR, DefaultPodCIDR)
	def(&st.Networking.DNSDomain, DefaultDNSDomain)
	def(&st.Profile.Name, ProfileDefault)
	if st.Profile.Name == ProfileCIS {
		def(&st.Profile.AuditLogDir, DefaultAuditLogDir)
	}
	defPort := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defPort(&st.Ports.EtcdClient, DefaultEtcdClientPort)
	defPort(&st.Ports.EtcdPeer, DefaultEtcdPeerPort)
	defPort(&st.Ports.EtcdMetrics, DefaultEtcdMetricsPort)
	defPort(&st.Ports.APIServer, DefaultAPIServerPort)
	defPort(&st.Ports.ControllerManager, DefaultControllerManagerPort)
	defPort(&st.Ports.Scheduler, DefaultSchedulerPort)
	if st.Etcd.InitialCluster == "" && st.AdvertiseAddress != "" {
		st.Etcd.InitialCluster = fmt.Sprintf("%s=https://%s", st.Etcd.MemberName, net.JoinHostPort(st.AdvertiseAddress, fmt.Sprint(st.Ports.EtcdPeer)))
	}
}

// Roster is the components this node runs, in start order: kube-vip exactly
// when the state has a VIP. A fresh slice per call.
func (st *NodeState) Roster() []string {
	out := make([]string, 0, len(Components))
	for _, c := range Components {
		if c == KubeVIP && st.VIP == nil {
			continue
		}
		out = append(out, c)
	}
	return out
}

// IsStopped reports whether comp is one of st.Stopped.
func (st *NodeState) IsStopped(comp string) bool { return slices.Contains(st.Stopped, comp) }

// Marshal encodes st as YAML; Parse(Marshal(st)) yields an equal state.
func (st *NodeState) Marshal() ([]byte, error) {
	b, err := yaml.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode node state: %w", err)
	}
	return b, nil
}

// Clone returns a deep copy of st.
func (st *NodeState) Clone() *NodeState {
	b, err := st.Marshal()
	if err != nil {
		panic(fmt.Sprintf("nodestate: clone of a state that does not encode: %v", err)) // a NodeState always encodes
	}
	var c NodeState
	if err := yaml.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("nodestate: clone decode: %v", err))
	}
	return &c
}

// Save validates st and writes it to path atomically and durably (mode
// 0600). On error the file at path is unchanged.
func (st *NodeState) Save(path string) error {
	if err := st.Validate(); err != nil {
		return fmt.Errorf("node state %s: %w", path, err)
	}
	b, err := st.Marshal()
	if err != nil {
		return err
	}
	if _, err := durable.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("node state %s: %w", path, err)
	}
	return nil
}
