package nodestate

// A component's version as the versions field writes it. Reading it from
// an image's tag is package resolve's (resolve.Version).

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

// validateVersions checks that the versions field names only components
// this node runs. That each parses and agrees with its image's tag is
// resolve.Validate's check: it reads the tags.
func (st *NodeState) validateVersions(roster []string, bad func(field, format string, a ...any)) {
	for _, c := range slices.Sorted(maps.Keys(st.Versions)) {
		if !slices.Contains(roster, c) {
			bad("versions."+c, "not a component this node runs")
		}
	}
}

// ExampleVersion is a version as written for component, for messages.
func ExampleVersion(component string) string {
	if component == Etcd {
		return "3.6.16"
	}
	return "v1.36.3"
}
