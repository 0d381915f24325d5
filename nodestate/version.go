package nodestate

// This file derives each component's version from its image and the
// explicit versions field.

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// etcdRevision is the image revision kubeadm's etcd images carry after the
// etcd version ("3.6.16-0"): it is not part of etcd's version.
var etcdRevision = regexp.MustCompile(`-[0-9]+$`)

// ImageTag is the tag of an image reference ("registry.k8s.io/etcd:3.6.16-0"
// -> "3.6.16-0"), "" when it has none (a reference pinned by digest alone
// or naming no tag). A digest after the tag is ignored.
func ImageTag(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return "" // no tag, or the colon was a registry port
	}
	return ref[i+1:]
}

// ParseComponentVersion parses a version as written for component: etcd's
// without a "v" ("3.6.16", an image tag's "-0" revision dropped), every
// other component's with one ("v1.36.3"). It accepts the other spelling of
// the "v" too, so a versions field may be written either way.
func ParseComponentVersion(component, s string) (*version.Version, error) {
	if strings.TrimSpace(s) != s || s == "" {
		return nil, fmt.Errorf("version %q: must be a semantic version", s)
	}
	if component == Etcd {
		s = etcdRevision.ReplaceAllString(s, "")
	}
	return version.ParseSemantic(strings.TrimPrefix(s, "v"))
}

// ComponentVersion is the version component runs at, from (in this order)
// its image tag when that is a version, the versions field, and for the
// Kubernetes components the node's kubernetesVersion. Validate has checked
// that a tag and a versions entry agree. It is nil, with no error, for
// kube-vip without a version tag (nothing about kube-vip is rendered per
// version), and an error for etcd whose version is known from nowhere.
func (st *NodeState) ComponentVersion(component string) (*version.Version, error) {
	tagV, explicit, err := st.componentVersions(component)
	switch {
	case err != nil:
		return nil, err
	case tagV != nil:
		return tagV, nil
	case explicit != nil:
		return explicit, nil
	case component == KubeVIP:
		return nil, nil
	case component == Etcd:
		return nil, fmt.Errorf("etcd: the version of image %q is unknown: its tag is not a version; set versions.etcd (for example \"3.6.16\")", st.Image(Etcd))
	}
	v, err := ParseKubernetesVersion(st.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", component, err)
	}
	return v, nil
}

// componentVersions is the version the image tag says (nil when the tag is
// not a version) and the one the versions field says (nil when unset).
func (st *NodeState) componentVersions(component string) (tagV, explicit *version.Version, err error) {
	if tag := ImageTag(st.Image(component)); tag != "" {
		tagV, _ = ParseComponentVersion(component, tag) // "latest" is no version
	}
	if s, ok := st.Versions[component]; ok {
		explicit, err = ParseComponentVersion(component, s)
		if err != nil {
			return nil, nil, fmt.Errorf("versions.%s: %w", component, err)
		}
	}
	return tagV, explicit, nil
}

// validateVersions checks the versions field: known components this node
// runs, parseable values, each agreeing with its image's tag, and etcd's
// version known.
func (st *NodeState) validateVersions(roster []string, bad func(field, format string, a ...any)) {
	for _, c := range slices.Sorted(maps.Keys(st.Versions)) {
		if !slices.Contains(roster, c) {
			bad("versions."+c, "not a component this node runs")
		}
	}
	for _, c := range roster {
		if st.Image(c) == "" {
			continue // reported as a missing image
		}
		tagV, explicit, err := st.componentVersions(c)
		switch {
		case err != nil:
			bad("versions."+c, "must be a version like %s, got %q", exampleVersion(c), st.Versions[c])
		case tagV != nil && explicit != nil && !tagV.EqualTo(explicit):
			bad("versions."+c, "%s disagrees with the tag of images.%s (%q, version %s): give one version", st.Versions[c], c, st.Image(c), tagV)
		case c == Etcd && tagV == nil && explicit == nil:
			bad("versions.etcd", "required: the tag of images.etcd (%q) is not a version, so the version etcd runs at is unknown", st.Image(c))
		}
	}
}

func exampleVersion(component string) string {
	if component == Etcd {
		return "3.6.16"
	}
	return "v1.36.3"
}
