package adopt

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// mutatePod rewrites the manifest at path after f changed its pod, as
// kubeadm writes one (sigs.k8s.io/yaml of the typed pod).
func mutatePod(t *testing.T, path string, f func(*corev1.Pod)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := kubeletpod.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	f(pod)
	if b, err = yaml.Marshal(pod); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubeadmExtraVolume adds a volume as kubeadm's apiServer.extraVolumes
// does (AddExtraHostPathMounts): volume and mount of one name, the
// volumes and mounts sorted by name.
func kubeadmExtraVolume(pod *corev1.Pod, name, hostPath, mountPath string, readOnly bool, typ corev1.HostPathType) {
	c := &pod.Spec.Containers[0]
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostPath, Type: &typ}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath, ReadOnly: readOnly})
	sort.Slice(pod.Spec.Volumes, func(i, j int) bool { return pod.Spec.Volumes[i].Name < pod.Spec.Volumes[j].Name })
	sort.Slice(c.VolumeMounts, func(i, j int) bool { return c.VolumeMounts[i].Name < c.VolumeMounts[j].Name })
}

// auditFixture is the custom-paths fixture with kubeadm's CIS audit
// setup: apiServer.extraVolumes for the audit policy (read-only file), the
// audit log directory (written) and an admission configuration directory.
func auditFixture(t *testing.T) *Source {
	t.Helper()
	dir, cfg := copyFixture(t, "v1.37.2", "custom-paths")
	mutatePod(t, filepath.Join(dir, "kube-apiserver.yaml"), func(pod *corev1.Pod) {
		c := &pod.Spec.Containers[0]
		c.Command = append(c.Command, "--audit-log-path=/var/log/kubernetes/audit/audit.log", "--audit-policy-file=/etc/kubernetes/audit/policy.yaml",
			"--admission-control-config-file=/etc/kubernetes/admission/admission.yaml")
		kubeadmExtraVolume(pod, "audit-log", "/var/log/kubernetes/audit", "/var/log/kubernetes/audit", false, corev1.HostPathDirectoryOrCreate)
		kubeadmExtraVolume(pod, "audit-policy", "/etc/kubernetes/audit/policy.yaml", "/etc/kubernetes/audit/policy.yaml", true, corev1.HostPathFile)
		kubeadmExtraVolume(pod, "admission", "/etc/kubernetes/admission", "/etc/kubernetes/admission", true, "")
	})
	src, err := ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// The defect: apiServer.extraVolumes were taken for CA certificate
// directories, so the derived state mounted the audit log directory
// read-only into kube-apiserver (which must write it) and all three into
// kube-controller-manager. The CA directories are exactly kubeadm's.
func TestAuditVolumesAreNotCACertDirs(t *testing.T) {
	src := auditFixture(t)
	st, _, err := Derive(src)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/etc/pki/ca-trust", "/etc/pki/tls/certs"}; !slices.Equal(st.CACertDirs, want) {
		t.Errorf("caCertDirs = %v, want kubeadm's %v only", st.CACertDirs, want)
	}
	api, err := manifest.Render(st, manifest.Profile{}, nodestate.KubeAPIServer, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range api.Spec.Containers[0].VolumeMounts {
		if m.MountPath == "/var/log/kubernetes/audit" && m.ReadOnly {
			t.Errorf("kube-apiserver mounts its audit log directory read-only: %+v", m)
		}
	}
	cm, err := manifest.Render(st, manifest.Profile{}, nodestate.ControllerManager, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range cm.Spec.Volumes {
		switch v.HostPath.Path {
		case "/var/log/kubernetes/audit", "/etc/kubernetes/audit/policy.yaml", "/etc/kubernetes/admission":
			t.Errorf("kube-controller-manager mounts kube-apiserver's extra volume %s", v.HostPath.Path)
		}
	}
}
