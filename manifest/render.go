// Package manifest renders and stores the control-plane static pod
// manifests of one node.
//
// The render half (Render, Encode, DerivedFiles, Target) is pure: a
// nodestate.NodeState plus the Profile file contents LoadProfile read give
// the same bytes every time, kubeadm's layout and flags, with every hostPath
// mounted at its own path so argv is valid on the host as well. The store
// half writes those bytes into the kubelet's staticPodPath as its sole
// writer.
package manifest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// RestartedAtAnnotation is bumped by Restart; kubelet recreates a static pod
// whenever its manifest content changes, and the annotation is the one field
// whose only job is to change.
const RestartedAtAnnotation = "stratum.ciq.com/restarted-at"

// AuditPolicyAnnotation carries the sha256 of the node profile's plain
// config files, in order, on the kube-apiserver pod: for the cis profile,
// its audit policy. The apiserver reads such a file only when it starts,
// and its manifest names the file without its contents, so a changed file
// would otherwise leave the running apiserver on the old one.
const AuditPolicyAnnotation = "stratum.ciq.com/audit-policy-sha256"

// AdmissionConfigAnnotation carries the sha256 of the node profile's
// AdmissionConfiguration file on the kube-apiserver pod. The apiserver reads
// the admission configuration merged from it only when it starts, and its
// manifest names that file without its contents, so a changed admission
// body would otherwise leave the running apiserver on the old policy. It is
// an annotation of its own so AuditPolicyAnnotation keeps the value it had.
const AdmissionConfigAnnotation = "stratum.ciq.com/admission-config-sha256"

// The annotations kubeadm puts on its etcd and kube-apiserver pods; tools
// that find the control plane through the mirror pods (kubeadm's own etcd
// client among them) read these.
const (
	EtcdAdvertiseClientURLsAnnotation   = "kubeadm.kubernetes.io/etcd.advertise-client-urls"
	APIServerAdvertiseAddressAnnotation = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"
)

// kubeadm's probe timings (cmd/kubeadm/app/util/staticpod): liveness waits
// one period and allows 8 failures, readiness polls every second, startup
// allows the control-plane health check timeout (4m) in 10s periods.
const (
	probeTimeoutSeconds          = 15
	livenessInitialDelaySeconds  = 10
	livenessPeriodSeconds        = 10
	livenessFailureThreshold     = 8
	readinessPeriodSeconds       = 1
	readinessFailureThreshold    = 3
	startupPeriodSeconds         = 10
	startupFailureThreshold      = 24
	terminationGracePeriodSecond = 30
)

// kubeVIPCommand is kube-vip's argv[0]. The upstream image is FROM scratch
// and keeps the binary at /kube-vip with no PATH, so the command must be the
// absolute path; proc's argv[0]-basename rule still finds "kube-vip".
const kubeVIPCommand = "/kube-vip"

// cisTLSCipherSuites is the CIS benchmark's strong cipher list (1.2.x).
var cisTLSCipherSuites = strings.Join([]string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
}, ",")

// checkRoster reports whether name is a component st renders, and if not
// says why, naming the roster.
func checkRoster(st *nodestate.NodeState, name string) error {
	roster := NamesFor(st)
	if !IsName(name) {
		return fmt.Errorf("%q is not a component (known: %s; this node renders %s)", name, joinNames(Names), joinNames(roster))
	}
	for _, n := range roster {
		if n == name {
			return nil
		}
	}
	why := ""
	if name == nodestate.KubeVIP {
		why = ": kube-vip runs only on a node whose state sets vip"
	}
	return fmt.Errorf("%s is not in this node's roster (%s)%s", name, joinNames(roster), why)
}

// Render builds component name's static pod from st and prof. It is pure:
// it reads no file, no clock and no environment, and iterates no map
// unordered, so the same inputs always give the same pod (and Encode the
// same bytes). restartedAt is RestartedAtAnnotation's value; "" renders no
// such annotation.
//
// It is an error to ask for a name outside NamesFor(st) (the error names the
// roster), for a component with no image in st, for an invalid st, and for
// a cis state whose prof lacks the profile's files (read them with
// LoadProfile) or holds a malformed admission file.
func Render(st *nodestate.NodeState, prof Profile, name, restartedAt string) (*corev1.Pod, error) {
	if err := checkRoster(st, name); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	if st.Images[name] == "" {
		return nil, fmt.Errorf("render %s: no image: set images.%s in the node state", name, name)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	if st.Profile.Name == nodestate.ProfileCIS && name == nodestate.KubeAPIServer {
		if err := prof.requireCIS(); err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
		if _, err := parseAdmission(prof.AdmissionConfig); err != nil {
			return nil, fmt.Errorf("render %s: profile.admissionConfigFile %s: %w", name, st.Profile.AdmissionConfigFile, err)
		}
	}
	var pod *corev1.Pod
	switch name {
	case nodestate.Etcd:
		pod = etcdPod(st)
	case nodestate.KubeAPIServer:
		pod = apiServerPod(st, prof)
	case nodestate.ControllerManager:
		pod = controllerManagerPod(st)
	case nodestate.Scheduler:
		pod = schedulerPod(st)
	case nodestate.KubeVIP:
		pod = kubeVIPPod(st)
	}
	if restartedAt != "" {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[RestartedAtAnnotation] = restartedAt
	}
	return pod, nil
}

// Encode serializes pod as a manifest with sigs.k8s.io/yaml: struct fields in
// declaration order, map keys sorted, so equal pods give equal bytes.
func Encode(pod *corev1.Pod) ([]byte, error) {
	b, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encode pod %s: %w", pod.Name, err)
	}
	return b, nil
}

// RenderBytes is Encode(Render(st, prof, name, restartedAt)).
func RenderBytes(st *nodestate.NodeState, prof Profile, name, restartedAt string) ([]byte, error) {
	pod, err := Render(st, prof, name, restartedAt)
	if err != nil {
		return nil, err
	}
	return Encode(pod)
}

// DecodePod strictly decodes a manifest: an unknown or duplicated field is
// an error, and so is anything but a kind Pod, apiVersion v1 object with at
// least one container. It applies no API defaults.
func DecodePod(b []byte) (*corev1.Pod, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("decode pod: %w", errEmpty)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		return nil, fmt.Errorf("decode pod: must be apiVersion v1 kind Pod, got apiVersion %q kind %q", pod.APIVersion, pod.Kind)
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("decode pod %s: no containers", pod.Name)
	}
	return &pod, nil
}

// RestartedAt is pod's RestartedAtAnnotation, "" when it has none.
func RestartedAt(pod *corev1.Pod) string {
	return pod.Annotations[RestartedAtAnnotation]
}

// Target is how proc finds and checks component name on st's node: argv[0]'s
// basename, and the health URL of the component's startup probe (the check
// that says it has come up), derived from the same flags the manifest
// carries. kube-vip has no listener and so no Health. A name outside
// NamesFor(st) is an error.
func Target(st *nodestate.NodeState, name string) (proc.Target, error) {
	if err := checkRoster(st, name); err != nil {
		return proc.Target{}, fmt.Errorf("target %s: %w", name, err)
	}
	t := proc.Target{Name: name, Binary: binaryName(name)}
	if ep, ok := probeFor(st, name, componentArgs(st, name)); ok {
		t.Health = ep.url(ep.startup)
	}
	return t, nil
}

func binaryName(name string) string {
	if name == nodestate.KubeVIP {
		return path.Base(kubeVIPCommand)
	}
	return name
}

// --- arguments ---

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

// componentArgs is the final flag set of a component, extra args applied.
func componentArgs(st *nodestate.NodeState, name string) args {
	var a args
	switch name {
	case nodestate.Etcd:
		a = etcdArgs(st)
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

func etcdArgs(st *nodestate.NodeState) args {
	lo := loopback(st)
	listenClient := "https://" + hostPort(lo, st.Ports.EtcdClient)
	if st.AdvertiseAddress != lo {
		listenClient += "," + etcdClientURL(st)
	}
	return args{
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
		// etcd 3.5 names; 3.6 still accepts them (kubeadm switches to
		// --feature-gates=InitialCorruptCheck=true for 3.6 images).
		"experimental-initial-corrupt-check":          "true",
		"experimental-watch-progress-notify-interval": "5s",
	}
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

// --- probes ---

// probeEndpoint is where a component's probes go.
type probeEndpoint struct {
	scheme              corev1.URIScheme
	host                string
	port                int
	liveness, readiness string // paths; readiness "" means no readiness probe
	startup             string
}

func (e probeEndpoint) url(p string) string {
	return strings.ToLower(string(e.scheme)) + "://" + hostPort(e.host, e.port) + p
}

// probeHost is the address a probe of a listener bound to bind reaches: the
// bind address itself, or loopback for an unspecified (all-addresses) one.
func probeHost(st *nodestate.NodeState, bind string) string {
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		return bind
	}
	return loopback(st)
}

// probeFor derives a component's probe endpoint from its final flags, so an
// extra arg that moves a listener moves its probes and its Target with it.
func probeFor(st *nodestate.NodeState, name string, a args) (probeEndpoint, bool) {
	port := func(def int) int {
		if p, err := strconv.Atoi(a["secure-port"]); err == nil {
			return p
		}
		return def
	}
	switch name {
	case nodestate.Etcd:
		e := probeEndpoint{scheme: corev1.URISchemeHTTP, host: loopback(st), port: st.Ports.EtcdMetrics,
			liveness: "/health?exclude=NOSPACE&serializable=true", startup: "/health?serializable=false"}
		first, _, _ := strings.Cut(a["listen-metrics-urls"], ",")
		if u, err := url.Parse(first); err == nil && u.Port() != "" {
			if p, err := strconv.Atoi(u.Port()); err == nil {
				e.port = p
				e.host = probeHost(st, u.Hostname())
				if u.Scheme == "https" {
					e.scheme = corev1.URISchemeHTTPS
				}
			}
		}
		return e, true
	case nodestate.KubeAPIServer:
		return probeEndpoint{scheme: corev1.URISchemeHTTPS, host: probeHost(st, a["bind-address"]), port: port(st.Ports.APIServer),
			liveness: "/livez", readiness: "/readyz", startup: "/livez"}, true
	case nodestate.ControllerManager:
		return probeEndpoint{scheme: corev1.URISchemeHTTPS, host: probeHost(st, a["bind-address"]), port: port(st.Ports.ControllerManager),
			liveness: "/healthz", startup: "/healthz"}, true
	case nodestate.Scheduler:
		return probeEndpoint{scheme: corev1.URISchemeHTTPS, host: probeHost(st, a["bind-address"]), port: port(st.Ports.Scheduler),
			liveness: "/healthz", startup: "/healthz"}, true
	}
	return probeEndpoint{}, false
}

func httpProbe(e probeEndpoint, p string, initialDelay, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host:   e.host,
			Path:   p,
			Port:   intstr.FromInt32(int32(e.port)),
			Scheme: e.scheme,
		}},
		InitialDelaySeconds: initialDelay,
		TimeoutSeconds:      probeTimeoutSeconds,
		PeriodSeconds:       period,
		FailureThreshold:    failures,
	}
}

func setProbes(c *corev1.Container, e probeEndpoint) {
	c.LivenessProbe = httpProbe(e, e.liveness, livenessInitialDelaySeconds, livenessPeriodSeconds, livenessFailureThreshold)
	if e.readiness != "" {
		c.ReadinessProbe = httpProbe(e, e.readiness, 0, readinessPeriodSeconds, readinessFailureThreshold)
	}
	c.StartupProbe = httpProbe(e, e.startup, startupPeriodSeconds, startupPeriodSeconds, startupFailureThreshold)
}

// --- volumes ---

// hostMount is a hostPath volume mounted at the same path it has on the
// host. Keeping mountPath == hostPath means every path in argv is valid on
// the host as well as in the container.
type hostMount struct {
	name     string
	path     string
	typ      corev1.HostPathType
	readOnly bool
}

func setMounts(pod *corev1.Pod, c *corev1.Container, mounts []hostMount) {
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].name < mounts[j].name })
	for _, m := range mounts {
		typ := m.typ
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name:         m.name,
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: m.path, Type: &typ}},
		})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m.name, MountPath: m.path, ReadOnly: m.readOnly})
	}
}

// caMounts are the host's CA bundles, read-only, as kubeadm mounts them;
// /etc/pki is where RHEL-family hosts keep theirs.
func caMounts() []hostMount {
	return []hostMount{
		{"ca-certs", "/etc/ssl/certs", corev1.HostPathDirectoryOrCreate, true},
		{"etc-ca-certificates", "/etc/ca-certificates", corev1.HostPathDirectoryOrCreate, true},
		{"etc-pki", "/etc/pki", corev1.HostPathDirectoryOrCreate, true},
		{"usr-local-share-ca-certificates", "/usr/local/share/ca-certificates", corev1.HostPathDirectoryOrCreate, true},
		{"usr-share-ca-certificates", "/usr/share/ca-certificates", corev1.HostPathDirectoryOrCreate, true},
	}
}

// --- pods ---

// basePod is the pod every component shares: kubeadm's ComponentPod, with
// the restart policy, DNS policy and grace period written out rather than
// left to API defaulting.
func basePod(name string, c corev1.Container) *corev1.Pod {
	grace := int64(terminationGracePeriodSecond)
	c.Name = name
	c.ImagePullPolicy = corev1.PullIfNotPresent
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{"component": name, "tier": "control-plane"},
		},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{c},
			HostNetwork:                   true,
			PriorityClassName:             "system-node-critical",
			RestartPolicy:                 corev1.RestartPolicyAlways,
			DNSPolicy:                     corev1.DNSClusterFirst,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
}

func requests(cpu, memory string) corev1.ResourceRequirements {
	r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	if memory != "" {
		r[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return corev1.ResourceRequirements{Requests: r}
}

// controlPlanePod is the pod of a component with flags and probes.
func controlPlanePod(st *nodestate.NodeState, name string, a args, res corev1.ResourceRequirements, mounts []hostMount) *corev1.Pod {
	ep, _ := probeFor(st, name, a)
	c := corev1.Container{
		Image:     st.Images[name],
		Command:   command(name, a),
		Resources: res,
	}
	setProbes(&c, ep)
	pod := basePod(name, c)
	setMounts(pod, &pod.Spec.Containers[0], mounts)
	return pod
}

func etcdPod(st *nodestate.NodeState) *corev1.Pod {
	pod := controlPlanePod(st, nodestate.Etcd, componentArgs(st, nodestate.Etcd), requests("100m", "100Mi"), []hostMount{
		{"etcd-data", st.Etcd.DataDir, corev1.HostPathDirectoryOrCreate, false},
		{"etcd-certs", pki(st, "etcd"), corev1.HostPathDirectoryOrCreate, false},
	})
	pod.Annotations = map[string]string{EtcdAdvertiseClientURLsAnnotation: etcdClientURL(st)}
	return pod
}

func apiServerPod(st *nodestate.NodeState, prof Profile) *corev1.Pod {
	mounts := append(caMounts(), hostMount{"k8s-certs", st.PKIDir, corev1.HostPathDirectoryOrCreate, true})
	annotations := map[string]string{
		APIServerAdvertiseAddressAnnotation: hostPort(st.AdvertiseAddress, st.Ports.APIServer),
	}
	if st.Profile.Name == nodestate.ProfileCIS {
		mounts = append(mounts,
			hostMount{"audit-policy", st.Profile.AuditPolicyFile, corev1.HostPathFile, true},
			hostMount{"audit-log", st.Profile.AuditLogDir, corev1.HostPathDirectoryOrCreate, false},
			hostMount{"stratum-config", st.ConfigDir, corev1.HostPathDirectoryOrCreate, true},
		)
		annotations[AuditPolicyAnnotation] = prof.auditPolicyHash()
		annotations[AdmissionConfigAnnotation] = prof.admissionHash()
	}
	pod := controlPlanePod(st, nodestate.KubeAPIServer, componentArgs(st, nodestate.KubeAPIServer), requests("250m", ""), mounts)
	pod.Annotations = annotations
	return pod
}

func controllerManagerPod(st *nodestate.NodeState) *corev1.Pod {
	mounts := append(caMounts(),
		hostMount{"k8s-certs", st.PKIDir, corev1.HostPathDirectoryOrCreate, true},
		hostMount{"kubeconfig", filepath.Join(st.KubeconfigDir, "controller-manager.conf"), corev1.HostPathFileOrCreate, true},
		hostMount{"flexvolume-dir", "/usr/libexec/kubernetes/kubelet-plugins/volume/exec", corev1.HostPathDirectoryOrCreate, false},
	)
	return controlPlanePod(st, nodestate.ControllerManager, componentArgs(st, nodestate.ControllerManager), requests("200m", ""), mounts)
}

func schedulerPod(st *nodestate.NodeState) *corev1.Pod {
	return controlPlanePod(st, nodestate.Scheduler, componentArgs(st, nodestate.Scheduler), requests("100m", ""), []hostMount{
		{"kubeconfig", filepath.Join(st.KubeconfigDir, "scheduler.conf"), corev1.HostPathFileOrCreate, true},
	})
}

// kubeVIPPod is kube-vip's control-plane static pod in ARP mode with
// leader election, as `kube-vip manifest pod --arp --controlplane
// --leaderElection` renders it, minus the metrics server, so it has no
// listener. It reads <KubeconfigDir>/admin.conf, named explicitly.
func kubeVIPPod(st *nodestate.NodeState) *corev1.Pod {
	cidr := "32"
	if ip := net.ParseIP(st.VIP.Address); ip != nil && ip.To4() == nil {
		cidr = "128"
	}
	kubeconfig := filepath.Join(st.KubeconfigDir, "admin.conf")
	// An empty prometheus_server env does not turn the metrics server off
	// (kube-vip applies the variable only when it is non-empty, over the
	// flag's ":2112" default); the empty flag does.
	cmdArgs := []string{"manager", "--k8sConfigPath=" + kubeconfig, "--prometheusHTTPServer="}
	env := []corev1.EnvVar{
		{Name: "vip_arp", Value: "true"},
		{Name: "port", Value: strconv.Itoa(st.Ports.APIServer)},
		{Name: "vip_nodename", Value: st.NodeName},
		{Name: "vip_interface", Value: st.VIP.Interface},
		{Name: "vip_cidr", Value: cidr},
		{Name: "dns_mode", Value: "first"},
		{Name: "cp_enable", Value: "true"},
		{Name: "cp_namespace", Value: metav1.NamespaceSystem},
		{Name: "vip_leaderelection", Value: "true"},
		{Name: "vip_leasename", Value: "plndr-cp-lock"},
		{Name: "vip_leaseduration", Value: "5"},
		{Name: "vip_renewdeadline", Value: "3"},
		{Name: "vip_retryperiod", Value: "1"},
		{Name: "address", Value: st.VIP.Address},
		{Name: "prometheus_server", Value: ""},
	}
	c := corev1.Container{
		Image:   st.Images[nodestate.KubeVIP],
		Command: []string{kubeVIPCommand},
		Args:    cmdArgs,
		Env:     env,
		SecurityContext: &corev1.SecurityContext{
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}},
		},
	}
	pod := basePod(nodestate.KubeVIP, c)
	pod.Spec.HostAliases = []corev1.HostAlias{{IP: "127.0.0.1", Hostnames: []string{"kubernetes"}}}
	setMounts(pod, &pod.Spec.Containers[0], []hostMount{
		{"kubeconfig", kubeconfig, corev1.HostPathFile, true},
	})
	return pod
}
