package manifest

import (
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// kubeVIPCommand is kube-vip's argv[0]. The upstream image is FROM scratch
// and keeps the binary at /kube-vip with no PATH, so the command must be the
// absolute path; proc's argv[0]-basename rule still finds "kube-vip".
const kubeVIPCommand = "/kube-vip"

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

// caMounts are the host's CA bundles, read-only, as kubeadm mounts them:
// /etc/ssl/certs as ca-certs, and each of st's CA certificate directories
// under its path with the slashes made dashes (/etc/pki/ca-trust is
// etc-pki-ca-trust), as kubeadm names them.
func caMounts(st *nodestate.NodeState) []hostMount {
	out := []hostMount{{"ca-certs", "/etc/ssl/certs", corev1.HostPathDirectoryOrCreate, true}}
	for _, d := range st.CACertMountDirs() {
		out = append(out, hostMount{strings.ReplaceAll(d, "/", "-")[1:], d, corev1.HostPathDirectoryOrCreate, true})
	}
	return out
}

// systemNodeCriticalPriority is the value of the system-node-critical
// priority class, which kubeadm writes into its pods beside the class name.
const systemNodeCriticalPriority = int32(2000001000)

// basePod is the pod every component shares: kubeadm's ComponentPod
// (cmd/kubeadm/app/util/staticpod), field for field, so that kubelet sees
// a node kubeadm made and its render as the same pods. The restart policy,
// DNS policy and grace period are left to API defaulting, as kubeadm
// leaves them.
func basePod(name string, c corev1.Container) *corev1.Pod {
	priority := systemNodeCriticalPriority
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
			Containers:        []corev1.Container{c},
			Priority:          &priority,
			PriorityClassName: "system-node-critical",
			HostNetwork:       true,
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
func controlPlanePod(st *nodestate.NodeState, name string, rc resolve.Component, res corev1.ResourceRequirements, mounts []hostMount) *corev1.Pod {
	a := componentArgs(st, name, rc.Version)
	ep, _ := probeFor(st, name, a, rc.Version)
	c := corev1.Container{
		Image:     rc.Image,
		Command:   command(st, name, a),
		Resources: res,
	}
	setProbes(&c, ep)
	pod := basePod(name, c)
	setMounts(pod, &pod.Spec.Containers[0], mounts)
	return pod
}

func etcdPod(st *nodestate.NodeState, rc resolve.Component) *corev1.Pod {
	pod := controlPlanePod(st, nodestate.Etcd, rc, requests("100m", "100Mi"), []hostMount{
		{"etcd-data", st.Etcd.DataDir, corev1.HostPathDirectoryOrCreate, false},
		{"etcd-certs", pki(st, "etcd"), corev1.HostPathDirectoryOrCreate, false},
	})
	// kubeadm lists etcd's mounts data first (phases/etcd/local.go), not
	// by name as its other volumes and mounts.
	m := pod.Spec.Containers[0].VolumeMounts
	m[0], m[1] = m[1], m[0]
	pod.Annotations = map[string]string{EtcdAdvertiseClientURLsAnnotation: etcdClientURL(st)}
	if g := st.Etcd.TerminationGracePeriodSeconds; g != nil {
		v := *g
		pod.Spec.TerminationGracePeriodSeconds = &v
	}
	return pod
}

func apiServerPod(st *nodestate.NodeState, prof Profile, rc resolve.Component) *corev1.Pod {
	mounts := append(caMounts(st), hostMount{"k8s-certs", st.PKIDir, corev1.HostPathDirectoryOrCreate, true})
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
	pod := controlPlanePod(st, nodestate.KubeAPIServer, rc, requests("250m", ""), mounts)
	pod.Annotations = annotations
	return pod
}

func controllerManagerPod(st *nodestate.NodeState, rc resolve.Component) *corev1.Pod {
	mounts := append(caMounts(st),
		hostMount{"k8s-certs", st.PKIDir, corev1.HostPathDirectoryOrCreate, true},
		hostMount{"kubeconfig", filepath.Join(st.KubeconfigDir, "controller-manager.conf"), corev1.HostPathFileOrCreate, true},
	)
	if versions.Kube(rc.Version).FlexVolumeDir {
		mounts = append(mounts, hostMount{"flexvolume-dir", "/usr/libexec/kubernetes/kubelet-plugins/volume/exec", corev1.HostPathDirectoryOrCreate, false})
	}
	return controlPlanePod(st, nodestate.ControllerManager, rc, requests("200m", ""), mounts)
}

func schedulerPod(st *nodestate.NodeState, rc resolve.Component) *corev1.Pod {
	return controlPlanePod(st, nodestate.Scheduler, rc, requests("100m", ""), []hostMount{
		{"kubeconfig", filepath.Join(st.KubeconfigDir, "scheduler.conf"), corev1.HostPathFileOrCreate, true},
	})
}

// kubeVIPPod is kube-vip's control-plane static pod in ARP mode with
// leader election, as `kube-vip manifest pod --arp --controlplane
// --leaderElection` renders it, minus the metrics server, so it has no
// listener. It reads <KubeconfigDir>/admin.conf, named explicitly.
func kubeVIPPod(st *nodestate.NodeState, rc resolve.Component) *corev1.Pod {
	cidr := "32"
	if ip := net.ParseIP(st.VIP.Address); ip != nil && ip.To4() == nil {
		cidr = "128"
	}
	kubeconfig := kubeVIPKubeconfig(st)
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
		Image:   rc.Image,
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
