package engine

// Upgrades by version (`plan --to v1.36.3`, `run --to v1.36.3`): the release
// that moves every Kubernetes component of a node to a version and etcd to
// the version kubeadm pairs with its minor.

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// ByVersionError is an upgrade by version that cannot be made: the
// version (or a component's pinned image) says why.
type ByVersionError struct {
	// Version is the version asked for.
	Version string
	// Component is the component at fault; "" for the version itself.
	Component string
	Why       string
}

func (e *ByVersionError) Error() string {
	if e.Component == "" {
		return fmt.Sprintf("upgrade to %s: %s", e.Version, e.Why)
	}
	return fmt.Sprintf("upgrade to %s: %s: %s", e.Version, e.Component, e.Why)
}

// ReleaseForVersion is the release an upgrade of st to Kubernetes target
// applies, as `kubeadm upgrade apply target` would run it:
//
//   - kube-apiserver, kube-controller-manager and kube-scheduler at
//     target: a pinned image keeps its repository and gets target as tag;
//     an unpinned one moves with kubernetesVersion (resolve.KubeadmImage);
//   - etcd at the version kubeadm pairs with target's minor
//     (versions/kubeadm), the same way; an etcd already at that version or
//     newer is kept, as kubeadm skips the etcd upgrade then.
//
// target must be a version and not older than st's kubernetesVersion: an
// upgrade by version never goes down. A pinned image that has no version
// tag (pinned by digest) cannot be moved by version and is an error; the
// skip of a minor is left to the pre-flight checks, as for a release file.
func ReleaseForVersion(st *nodestate.NodeState, target string) (*Release, error) {
	tv, err := nodestate.ParseKubernetesVersion(target)
	if err != nil {
		return nil, &ByVersionError{Version: target, Why: "not a Kubernetes version: give v and a semantic version, like v1.36.3"}
	}
	if versions.Supported(nodestate.KubeAPIServer, tv) != nil {
		// Refused here, by what is supported: no release file could
		// make stratum-upgrade render a minor it does not know.
		return nil, &ByVersionError{Version: target, Why: fmt.Sprintf("Kubernetes %s is not supported: stratum-upgrade renders Kubernetes %s", versions.MinorOf(tv), strings.Join(versions.KubernetesMinors, ", "))}
	}
	n := resolve.Resolve(st)
	if cur := n.Kubernetes; cur != nil && tv.LessThan(cur) {
		return nil, &ByVersionError{Version: target, Why: fmt.Sprintf("older than the node's %s: an upgrade by version never goes down (rollback --last puts back the state before the last committed upgrade)", st.KubernetesVersion)}
	}
	rel := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: target, Images: map[string]string{}}
	roster := st.Roster()
	for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		if !st.Pinned(c) || !slices.Contains(roster, c) {
			continue
		}
		img, err := resolve.Retag(st.Images[c], strings.ReplaceAll(target, "+", "_"), c)
		if err != nil {
			return nil, &ByVersionError{Version: target, Component: c, Why: err.Error()}
		}
		rel.Images[c] = img
	}
	etcdImg, err := etcdByVersion(n, tv)
	if err != nil {
		return nil, &ByVersionError{Version: target, Component: nodestate.Etcd, Why: err.Error()}
	}
	if etcdImg != "" {
		rel.Images[nodestate.Etcd] = etcdImg
	}
	return rel, nil
}

// etcdByVersion is the image etcd's pin moves to for Kubernetes tv, ""
// when the pin stays (or etcd is not pinned and moves with
// kubernetesVersion).
func etcdByVersion(n *resolve.Node, tv *version.Version) (string, error) {
	st := n.State
	tag, err := resolve.EtcdTag(tv)
	if err != nil {
		return "", fmt.Errorf("%w; pin etcd's image in a release file (--to FILE)", err)
	}
	paired, err := resolve.EtcdVersion(tv)
	if err != nil {
		return "", err
	}
	cur, err := n.Version(nodestate.Etcd)
	if err != nil {
		return "", err
	}
	if !cur.LessThan(paired) {
		// Already at the paired version or newer: kept. Unpinned, it
		// would move with kubernetesVersion (down), so it is pinned where
		// it is.
		cur := n.Image(nodestate.Etcd)
		if at, err := resolve.KubeadmImage(st.Repository(), nodestate.Etcd, "v"+tv.String()); !st.Pinned(nodestate.Etcd) && (err != nil || at != cur) {
			return cur, nil
		}
		return "", nil
	}
	if !st.Pinned(nodestate.Etcd) {
		return "", nil
	}
	return resolve.Retag(st.Images[nodestate.Etcd], tag, nodestate.Etcd)
}

// Marshal is r as a release file: what the journal records as the release
// of an upgrade by version.
func (r *Release) Marshal() ([]byte, error) {
	b, err := yaml.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode release %s: %w", r.KubernetesVersion, err)
	}
	return b, nil
}
