package adopt

import (
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// Derive builds the node state src's manifests run. It reads no file: the
// fields come from the components' flags and images (kubeadm's
// configuration, when read, only cross-checks them: Notes), and every
// flag the render of those fields would not write with the same value
// becomes an extra arg. Volumes, environment variables and resources
// beyond the render become extraVolumes, extraEnvs and resources, and any
// other difference kubelet would see a patch (addPodFields). What none of
// them can express (a flag kubeadm left out that stratum renders, an
// argument that is no flag) is left for Check to report.
func Derive(src *Source) (*nodestate.NodeState, []string, error) {
	api := flagsOf(src.Pods[nodestate.KubeAPIServer])
	cm := flagsOf(src.Pods[nodestate.ControllerManager])
	sched := flagsOf(src.Pods[nodestate.Scheduler])
	etcd := flagsOf(src.Pods[nodestate.Etcd])
	need := func(comp string, flags map[string]string, name string) (string, error) {
		if v := flags[name]; v != "" {
			return v, nil
		}
		return "", refuse("%s has no --%s: kubeadm always sets it, so the manifest was edited by hand; restore kubeadm's", src.Files[comp], name)
	}
	st := &nodestate.NodeState{
		APIVersion: nodestate.APIVersion,
		Kind:       nodestate.Kind,
		Images:     map[string]string{},
		Profile:    nodestate.Profile{Name: nodestate.ProfileDefault},
	}
	var err error
	if st.Etcd.MemberName, err = need(nodestate.Etcd, etcd, "name"); err != nil {
		return nil, nil, err
	}
	// kubeadm names the etcd member after the node (nodeRegistration.name).
	st.NodeName = st.Etcd.MemberName
	if st.AdvertiseAddress, err = need(nodestate.KubeAPIServer, api, "advertise-address"); err != nil {
		return nil, nil, err
	}
	for _, c := range src.Components() {
		st.Images[c] = src.Pods[c].Spec.Containers[0].Image
	}
	if st.KubernetesVersion, err = versionOfImage(src, nodestate.KubeAPIServer); err != nil {
		return nil, nil, err
	}
	if st.Etcd.InitialCluster, err = need(nodestate.Etcd, etcd, "initial-cluster"); err != nil {
		return nil, nil, err
	}
	st.Etcd.InitialClusterState = or(etcd["initial-cluster-state"], "new")
	if st.Etcd.DataDir, err = need(nodestate.Etcd, etcd, "data-dir"); err != nil {
		return nil, nil, err
	}
	ca, err := need(nodestate.KubeAPIServer, api, "client-ca-file")
	if err != nil {
		return nil, nil, err
	}
	st.PKIDir = filepath.Dir(ca)
	kc, err := need(nodestate.ControllerManager, cm, "kubeconfig")
	if err != nil {
		return nil, nil, err
	}
	st.KubeconfigDir = filepath.Dir(kc)
	st.ConfigDir = nodestate.DefaultConfigDir
	st.Networking.ServiceCIDR = or(api["service-cluster-ip-range"], nodestate.DefaultServiceCIDR)
	// kubeadm without a podSubnet lets the network plugin allocate.
	st.Networking.PodCIDR = or(cm["cluster-cidr"], nodestate.NoPodCIDR)
	st.Networking.DNSDomain = nodestate.DefaultDNSDomain
	// kubeadm derives its issuer from the domain; with several issuers
	// (tokens rotating to another issuer) that one may be any of them.
	for _, iss := range valuesOf(argsOf(src.Pods[nodestate.KubeAPIServer]))["service-account-issuer"] {
		if d, ok := strings.CutPrefix(iss, "https://kubernetes.default.svc."); ok && d != "" {
			st.Networking.DNSDomain = d
			break
		}
	}
	st.CACertDirs = caCertDirsOf(src.Pods[nodestate.KubeAPIServer])
	ports := []struct {
		p    *int
		comp string
		v    string
		def  int
	}{
		{&st.Ports.APIServer, nodestate.KubeAPIServer, api["secure-port"], nodestate.DefaultAPIServerPort},
		{&st.Ports.ControllerManager, nodestate.ControllerManager, cm["secure-port"], nodestate.DefaultControllerManagerPort},
		{&st.Ports.Scheduler, nodestate.Scheduler, sched["secure-port"], nodestate.DefaultSchedulerPort},
		{&st.Ports.EtcdClient, nodestate.Etcd, urlPort(etcd["advertise-client-urls"]), nodestate.DefaultEtcdClientPort},
		{&st.Ports.EtcdPeer, nodestate.Etcd, urlPort(etcd["initial-advertise-peer-urls"]), nodestate.DefaultEtcdPeerPort},
		{&st.Ports.EtcdMetrics, nodestate.Etcd, urlPort(etcd["listen-metrics-urls"]), nodestate.DefaultEtcdMetricsPort},
	}
	for _, p := range ports {
		*p.p = p.def
		if p.v == "" {
			continue
		}
		n, err := strconv.Atoi(p.v)
		if err != nil || n < 1 || n > 65535 {
			return nil, nil, refuse("%s: port %q is not a port", src.Files[p.comp], p.v)
		}
		*p.p = n
	}
	if cm["allocate-node-cidrs"] != "true" && st.Networking.PodCIDR != nodestate.NoPodCIDR {
		// --cluster-cidr without allocation: kept as extra args below.
		st.Networking.PodCIDR = nodestate.NoPodCIDR
	}
	if pod := src.Pods[nodestate.KubeVIP]; pod != nil {
		st.VIP = vipOf(pod)
	}
	if err := resolve.Validate(st); err != nil {
		return nil, nil, refuse("the state derived from %s is not valid: %v", src.Dir, err)
	}
	if err := addExtraArgs(src, st); err != nil {
		return nil, nil, err
	}
	if err := addPodFields(src, st); err != nil {
		return nil, nil, err
	}
	return st, crossCheck(src.Config, st), nil
}

// addExtraArgs makes an extra arg of every flag a component runs with that
// the render of st would not write with the same values: a flag given
// more than once keeps every value, in order (two --service-account-issuer
// while tokens rotate), and extraArgsOrder records where each value is.
// Flags the node state owns (etcd's data-dir, name, ...) are not
// overridable; a difference there is left for Check to report.
func addExtraArgs(src *Source, st *nodestate.NodeState) error {
	for _, c := range src.Components() {
		pod, err := manifest.Render(st, manifest.Profile{}, c, "")
		if err != nil {
			return refuse("%s: %v", src.Files[c], err)
		}
		rendered := valuesOf(argsOf(pod))
		running := argsOf(src.Pods[c])
		values := valuesOf(running)
		// kubeadm puts its extra args after its own flags in the order
		// its configuration lists them, so that order is the extra args'.
		var seq []string
		for _, a := range running {
			k := a.Name
			if slices.Equal(rendered[k], values[k]) || c == nodestate.Etcd && nodestate.OwnedEtcdFlag(k) {
				continue
			}
			st.SetExtraArg(c, k, values[k]...)
			seq = append(seq, k)
		}
		if len(seq) > 0 {
			if st.ExtraArgsOrder == nil {
				st.ExtraArgsOrder = map[string][]string{}
			}
			st.ExtraArgsOrder[c] = orderOf(seq)
		}
	}
	if err := resolve.Validate(st); err != nil {
		return refuse("the extra args derived from %s are not valid: %v", src.Dir, err)
	}
	for _, c := range slices.Sorted(maps.Keys(st.ExtraArgs)) {
		if _, err := manifest.Render(st, manifest.Profile{}, c, ""); err != nil {
			return refuse("%s: %v", src.Files[c], err)
		}
	}
	return nil
}

// orderOf is the extraArgsOrder of the extra args seq names, one name per
// value in command-line order: a flag whose values are together is listed
// once, one whose values are apart once per value
// (nodestate.NodeState.ExtraArgList places them back).
func orderOf(seq []string) []string {
	runs := map[string]int{}
	for i, k := range seq {
		if i == 0 || seq[i-1] != k {
			runs[k]++
		}
	}
	var out []string
	for _, k := range seq {
		if runs[k] == 1 && slices.Contains(out, k) {
			continue
		}
		out = append(out, k)
	}
	return out
}

// versionOfImage is the Kubernetes version in comp's image tag.
func versionOfImage(src *Source, comp string) (string, error) {
	img := src.Pods[comp].Spec.Containers[0].Image
	v, tagged, err := resolve.KubernetesVersionOfImage(img)
	if !tagged {
		return "", refuse("%s: image %s has no version tag; adopt needs the Kubernetes version from the tag (kubeadm writes one)", src.Files[comp], img)
	}
	if err != nil {
		return "", refuse("%s: image %s: tag %q is not a Kubernetes version", src.Files[comp], img, v)
	}
	return v, nil
}

// urlPort is the port of the first URL of a comma-separated list, "" when
// it has none.
func urlPort(list string) string {
	first, _, _ := strings.Cut(list, ",")
	u, err := url.Parse(first)
	if err != nil {
		return ""
	}
	return u.Port()
}

// vipOf reads the VIP of a kube-vip pod from its environment.
func vipOf(pod *corev1.Pod) *nodestate.VIP {
	v := &nodestate.VIP{}
	for _, e := range pod.Spec.Containers[0].Env {
		switch e.Name {
		case "address", "vip_address":
			v.Address = e.Value
		case "vip_interface":
			v.Interface = e.Value
		}
	}
	return v
}

// crossCheck notes where kubeadm's configuration disagrees with what runs:
// the manifests win (kubelet runs them), and the operator should know.
func crossCheck(cfg *KubeadmConfig, st *nodestate.NodeState) []string {
	if cfg == nil {
		return nil
	}
	var notes []string
	check := func(what, inConfig, runs string) {
		if inConfig != "" && inConfig != runs {
			notes = append(notes, fmt.Sprintf("%s: %s says %s %s, the manifests run %s; the state follows the manifests", what, cfg.File, what, inConfig, runs))
		}
	}
	check("nodeRegistration.name", cfg.NodeName, st.NodeName)
	check("advertiseAddress", cfg.AdvertiseAddress, st.AdvertiseAddress)
	check("kubernetesVersion", cfg.KubernetesVersion, st.KubernetesVersion)
	check("certificatesDir", cleanDir(cfg.CertificatesDir), st.PKIDir)
	check("etcd.local.dataDir", cleanDir(cfg.EtcdDataDir), st.Etcd.DataDir)
	check("networking.serviceSubnet", cfg.ServiceSubnet, st.Networking.ServiceCIDR)
	check("networking.podSubnet", cfg.PodSubnet, st.Networking.PodCIDR)
	check("networking.dnsDomain", cfg.DNSDomain, or(st.Networking.DNSDomain, nodestate.DefaultDNSDomain))
	port := st.Ports.APIServer
	if port == 0 {
		port = nodestate.DefaultAPIServerPort
	}
	check("localAPIEndpoint.bindPort", strconv.Itoa(cfg.BindPort), strconv.Itoa(port))
	return notes
}

func cleanDir(d string) string {
	if d == "" {
		return ""
	}
	return filepath.Clean(d)
}

// caCertDirsOf is the CA certificate directories pod (kubeadm's
// kube-apiserver) mounts beside /etc/ssl/certs, in the order of its
// volumes: exactly those of kubeadmCACertDirs it mounts as kubeadm does
// (named after the path, read-only, DirectoryOrCreate). Any other volume
// (an audit log directory, an admission configuration) is an extra volume
// of the component that has it (addPodFields), not a CA directory, which
// the render mounts read-only into kube-controller-manager too.
func caCertDirsOf(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.HostPath == nil || !slices.Contains(kubeadmCACertDirs, v.HostPath.Path) || v.Name != strings.ReplaceAll(v.HostPath.Path, "/", "-")[1:] ||
			v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectoryOrCreate {
			continue
		}
		i := slices.IndexFunc(pod.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name })
		if i < 0 || !pod.Spec.Containers[0].VolumeMounts[i].ReadOnly || pod.Spec.Containers[0].VolumeMounts[i].MountPath != v.HostPath.Path {
			continue
		}
		out = append(out, v.HostPath.Path)
	}
	return out
}
