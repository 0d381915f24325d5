// Package kubeadm is kubeadm's knowledge of the Kubernetes releases that
// an upgrade by version needs: the etcd version kubeadm pairs with each
// Kubernetes minor (the etcd image `kubeadm init` and `kubeadm upgrade
// apply` use), and the patch releases of each minor known when the table
// was written (`plan` offers the newest).
//
// Each row names where it was read. It is a leaf package, read only
// through package resolve (which names a node's default etcd image from
// it). docs/versions.md says how to add a minor.
package kubeadm

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// Minor is what kubeadm knows of one Kubernetes minor.
type Minor struct {
	// Minor is "major.minor": "1.36".
	Minor string
	// Etcd is the tag of the etcd image kubeadm of this minor runs with
	// it ("3.6.8-0": etcd 3.6.8, image revision 0).
	Etcd string
	// EtcdSource is where Etcd was read: the kubeadm version, file and
	// entry.
	EtcdSource string
	// Patches are the releases of this minor known when the table was
	// written, oldest first ("v1.36.1", "v1.36.3").
	Patches []string
}

// patchesSource is where the Patches of every row were read.
const patchesSource = "the k8s.io/kubernetes versions on the Go module proxy (go list -m -versions k8s.io/kubernetes, 2026-12-05)"

// Table is kubeadm's pairing per Kubernetes minor, oldest first. The etcd
// version is that of the newest known kubeadm of the minor,
// cmd/kubeadm/app/constants/constants.go: constants.SupportedEtcdVersion
// read through constants.EtcdSupportedVersion, which falls back to the
// map's highest entry for a minor it does not list.
var Table = []Minor{
	{Minor: "1.34", Etcd: "3.6.5-0", Patches: []string{"v1.34.0", "v1.34.2", "v1.34.3", "v1.34.4"},
		EtcdSource: "kubeadm v1.34.4, cmd/kubeadm/app/constants/constants.go: SupportedEtcdVersion[34] = \"3.6.5-0\""},
	{Minor: "1.35", Etcd: "3.6.6-0", Patches: []string{"v1.35.4"},
		EtcdSource: "kubeadm v1.35.4, cmd/kubeadm/app/constants/constants.go: SupportedEtcdVersion[getSkewedKubernetesVersion(0).Minor()] = \"3.6.6-0\" (35)"},
	{Minor: "1.36", Etcd: "3.6.8-0", Patches: []string{"v1.36.1", "v1.36.3"},
		EtcdSource: "kubeadm v1.36.3, cmd/kubeadm/app/constants/constants.go: SupportedEtcdVersion[36] = \"3.6.8-0\""},
	{Minor: "1.37", Etcd: "3.7.0-0", Patches: []string{"v1.37.2"},
		EtcdSource: "kubeadm v1.37.2, cmd/kubeadm/app/constants/constants.go: SupportedEtcdVersion has no 37; EtcdSupportedVersion falls back to its highest entry, [36] = \"3.7.0-0\" (DefaultEtcdVersion = \"3.7.0-0\")"},
}

// PatchesSource says where the known patch releases were read.
func PatchesSource() string { return patchesSource }

// ErrUnknownMinor is wrapped by every UnknownMinorError.
var ErrUnknownMinor = errors.New("no etcd version paired with the Kubernetes minor")

// UnknownMinorError is a Kubernetes version whose minor the table lacks.
type UnknownMinorError struct {
	Version string
}

func (e *UnknownMinorError) Error() string {
	return fmt.Sprintf("Kubernetes %s: no etcd version is paired with its minor (the table of versions/kubeadm knows %s)", e.Version, strings.Join(Minors(), ", "))
}

// Unwrap makes errors.Is(err, ErrUnknownMinor) hold.
func (e *UnknownMinorError) Unwrap() error { return ErrUnknownMinor }

// Minors is the minors of the table, oldest first.
func Minors() []string {
	out := make([]string, len(Table))
	for i, m := range Table {
		out[i] = m.Minor
	}
	return out
}

// Lookup is the row of the minor of v.
func Lookup(v *version.Version) (Minor, bool) {
	return lookup(fmt.Sprintf("%d.%d", v.Major(), v.Minor()))
}

func lookup(minor string) (Minor, bool) {
	for _, m := range Table {
		if m.Minor == minor {
			return m, true
		}
	}
	return Minor{}, false
}

// EtcdTag is the tag of the etcd image kubeadm pairs with Kubernetes v
// ("3.6.8-0"); an *UnknownMinorError when the table lacks v's minor.
func EtcdTag(v *version.Version) (string, error) {
	m, ok := Lookup(v)
	if !ok {
		return "", &UnknownMinorError{Version: "v" + v.String()}
	}
	return m.Etcd, nil
}

// EtcdVersion is the etcd version of EtcdTag ("3.6.8").
func EtcdVersion(v *version.Version) (*version.Version, error) {
	tag, err := EtcdTag(v)
	if err != nil {
		return nil, err
	}
	base, _, _ := strings.Cut(tag, "-")
	return version.MustParseSemantic(base), nil
}

// Newest is the newest known patch release of the minor.
func (m Minor) Newest() string { return m.Patches[len(m.Patches)-1] }

// Next is the row of the minor after v's, false when the table has none.
func Next(v *version.Version) (Minor, bool) {
	return lookup(fmt.Sprintf("%d.%d", v.Major(), v.Minor()+1))
}
