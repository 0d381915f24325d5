package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// ReleaseKind and ReleaseAPIVersion identify a release document.
const (
	ReleaseAPIVersion = "stratum.ciq.com/v1"
	ReleaseKind       = "Release"
)

// Release is what an upgrade moves a node to: a Kubernetes version and the
// image of each component it pins. A component the release does not name
// keeps its pinned image; one the node does not pin runs from the node's
// imageRepository at the new version (resolve.Image). A release may name kube-vip for a node without a VIP (a
// release is cluster-wide); that image is then unused.
type Release struct {
	// APIVersion is the schema of the document: stratum.ciq.com/v1.
	APIVersion string `json:"apiVersion"`
	// Kind says the document is a release: Release.
	Kind string `json:"kind"`
	// KubernetesVersion is the version the node's control plane moves to;
	// it becomes the node state's kubernetesVersion.
	KubernetesVersion string `json:"kubernetesVersion"`
	// Images holds the new image reference of each component the release
	// pins, by component name; a component it does not name keeps its
	// pinned image (or, unpinned, runs from the node's imageRepository at
	// kubernetesVersion), and one the node does not run is ignored.
	Images map[string]string `json:"images,omitempty"`
	// Versions gives the version of an image the release names whose tag
	// is not a version (pinned by digest), as the node state's versions
	// field does.
	Versions map[string]string `json:"versions,omitempty"`
}

// ParseRelease strictly decodes and validates a release document. An unknown
// field (with its line and the closest known field), a node state given
// instead (*nodestate.KindError), a second document, an unknown component,
// an empty image or a malformed version is an error that names it.
func ParseRelease(b []byte) (*Release, error) {
	var r Release
	if err := nodestate.DecodeStrict(b, ReleaseKind, &r); err != nil {
		return nil, err
	}
	var problems []string
	if r.APIVersion != ReleaseAPIVersion || r.Kind != ReleaseKind {
		problems = append(problems, fmt.Sprintf("apiVersion/kind must be %s/%s, got %q/%q", ReleaseAPIVersion, ReleaseKind, r.APIVersion, r.Kind))
	}
	if _, err := nodestate.ParseKubernetesVersion(r.KubernetesVersion); err != nil {
		problems = append(problems, fmt.Sprintf("kubernetesVersion: must look like v1.34.5, got %q", r.KubernetesVersion))
	}
	for _, n := range slices.Sorted(maps.Keys(r.Images)) {
		if !manifest.IsName(n) {
			problems = append(problems, fmt.Sprintf("images.%s: unknown component %q (known: %s)", n, n, strings.Join(manifest.Names, ", ")))
		} else if strings.TrimSpace(r.Images[n]) == "" {
			problems = append(problems, fmt.Sprintf("images.%s: empty image reference", n))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(r.Versions)) {
		if _, ok := r.Images[n]; !ok {
			problems = append(problems, fmt.Sprintf("versions.%s: the release names no image of %s", n, n))
		}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return &r, nil
}

// LoadRelease reads and parses the release file at path. Its errors start
// with "release PATH: ".
func LoadRelease(path string) (*Release, []byte, error) {
	b, err := durable.ReadInput(path) // bounded: 1 MiB
	if err != nil {
		return nil, nil, fmt.Errorf("release %s: %w", path, err)
	}
	r, err := ParseRelease(b)
	if err != nil {
		return nil, nil, fmt.Errorf("release %s: %w", path, err)
	}
	return r, b, nil
}

// Apply returns the node state st upgraded to r, validated. st is unchanged.
// A component that can surge and whose image changes gets
// --permit-port-sharing=true (withPortSharing): its replacement restarts it
// anyway, and the next one can then start beside it. For the same reason
// an etcd whose image changes gets a 2 s stop grace (withEtcdStopGrace),
// which its next stop uses.
func (r *Release) Apply(st *nodestate.NodeState) (*nodestate.NodeState, error) {
	to := st.Clone()
	to.KubernetesVersion = r.KubernetesVersion
	// A stopped component is upgraded too: start renders its new image.
	roster := st.Roster()
	for n, img := range r.Images {
		if !slices.Contains(roster, n) {
			continue
		}
		if resolve.Image(to, n) != img {
			// The node's explicit version was that of the old image.
			delete(to.Versions, n)
		}
		if to.Images == nil {
			to.Images = map[string]string{}
		}
		if to.Images[n] != img {
			withPortSharing(to, n)
			if n == nodestate.Etcd {
				withEtcdStopGrace(to)
			}
		}
		to.Images[n] = img
		if v, ok := r.Versions[n]; ok {
			if to.Versions == nil {
				to.Versions = map[string]string{}
			}
			to.Versions[n] = v
		}
	}
	if err := resolve.Validate(to); err != nil {
		// The node state was valid: what is wrong came with the release,
		// and each field error names its field (images.kube-apiserver).
		var ve nodestate.ValidationError
		if errors.As(err, &ve) {
			return nil, ve.Fields()
		}
		return nil, err
	}
	return to, nil
}

// portSharingFlag is the flag of kube-apiserver, kube-controller-manager
// and kube-scheduler (k8s.io/apiserver's SecureServingOptions, since 1.19)
// that listens with SO_REUSEPORT, so a second instance can listen on the
// same port: what a surge needs of both instances.
const portSharingFlag = manifest.PortSharingFlag

// withPortSharing sets --permit-port-sharing=true in st's extra args of
// comp, when comp can surge and the node state says nothing of the flag
// (an operator's explicit value stands).
func withPortSharing(st *nodestate.NodeState, comp string) {
	if !surgeable(comp) {
		return
	}
	if _, set := st.ExtraArgs[comp][portSharingFlag]; set {
		return
	}
	if st.ExtraArgs == nil {
		st.ExtraArgs = map[string]map[string]nodestate.ArgValues{}
	}
	if st.ExtraArgs[comp] == nil {
		st.ExtraArgs[comp] = map[string]nodestate.ArgValues{}
	}
	st.ExtraArgs[comp][portSharingFlag] = nodestate.ArgValues{"true"}
}

// etcdStopGrace is the etcd pod's terminationGracePeriodSeconds run --to
// sets: kubelet's own floor (kuberuntime's minimumGracePeriodInSeconds).
// etcd on SIGTERM first closes its client server and waits for open watches
// up to its request timeout (5 s + 2 election timeouts: 7 s at kubeadm's
// flags, measured 7.01 s with kube-apiserver's watches open, 0.01 s
// without) before it stops raft; the node's API server waits for etcd
// that long on top of kubelet's release and etcd's start, longer than a
// client's 10 s timeout. Killed after 2 s, etcd is back in about 4: a kill
// loses no acknowledged write (the WAL is fsynced first), and on an HA
// member stratum has already moved leadership away (cluster.Gate).
const etcdStopGrace int64 = 2

// withEtcdStopGrace sets etcd's stop grace in st to etcdStopGrace unless
// the node state names one (an operator's value stands).
func withEtcdStopGrace(st *nodestate.NodeState) {
	if st.Etcd.TerminationGracePeriodSeconds != nil {
		return
	}
	g := etcdStopGrace
	st.Etcd.TerminationGracePeriodSeconds = &g
}
