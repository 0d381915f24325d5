package resolve

// kubeadm's table (versions/kubeadm) is read here and nowhere else: the
// etcd kubeadm pairs with a Kubernetes minor and the known patch releases.

import (
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/versions/kubeadm"
)

// KubeadmMinor is kubeadm's row for a Kubernetes minor.
type KubeadmMinor = kubeadm.Minor

// ErrUnknownMinor is wrapped by the error of a Kubernetes minor kubeadm's
// table lacks.
var ErrUnknownMinor = kubeadm.ErrUnknownMinor

// EtcdTag is the tag of the etcd image kubeadm pairs with Kubernetes v
// ("3.6.8-0"); an error wrapping ErrUnknownMinor when the table lacks v's
// minor.
func EtcdTag(v *version.Version) (string, error) { return kubeadm.EtcdTag(v) }

// EtcdVersion is the etcd version of EtcdTag ("3.6.8").
func EtcdVersion(v *version.Version) (*version.Version, error) { return kubeadm.EtcdVersion(v) }

// LookupMinor is kubeadm's row of v's minor.
func LookupMinor(v *version.Version) (KubeadmMinor, bool) { return kubeadm.Lookup(v) }

// NextMinor is kubeadm's row of the minor after v's, false when it has none.
func NextMinor(v *version.Version) (KubeadmMinor, bool) { return kubeadm.Next(v) }

// PatchesSource says where the known patch releases were read.
func PatchesSource() string { return kubeadm.PatchesSource() }
