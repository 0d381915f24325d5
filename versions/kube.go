package versions

// This file holds what of the Kubernetes components' static pods depends
// on their minor.

import (
	"k8s.io/apimachinery/pkg/util/version"
)

// KubeForm is the version-dependent part of the kube-apiserver,
// kube-controller-manager and kube-scheduler pods. kubeadm renders the
// same flags and probes for every minor from 1.34 to 1.37
// (cmd/kubeadm/app/phases/controlplane/manifests.go); what differs is here.
type KubeForm struct {
	// FlexVolumeDir mounts the kubelet's flexvolume plugin directory into
	// kube-controller-manager, as kubeadm does before 1.36; 1.36 dropped
	// the mount along with in-tree flexvolume support in kubeadm.
	FlexVolumeDir bool
}

var v136 = version.MajorMinor(1, 36)

// Kube is the version-dependent form of the Kubernetes components at v.
func Kube(v *version.Version) KubeForm {
	return KubeForm{FlexVolumeDir: v.LessThan(v136)}
}
