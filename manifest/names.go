package manifest

import (
	"strings"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// Names is every component rendered as a static pod, in start order.
// Callers must not modify it; NamesFor returns a copy for a node.
var Names = []string{nodestate.Etcd, nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler, nodestate.KubeVIP}

// NamesFor is the roster this node state renders: Names in start order, with
// kube-vip in it exactly when the state carries a VIP, and without the
// components it lists as stopped (st.Stopped: they have no manifest until
// started). It is the one place these rules live. It returns a fresh slice
// on every call, so a caller may append to or reorder its roster freely.
func NamesFor(st *nodestate.NodeState) []string {
	out := make([]string, 0, len(Names))
	for _, n := range Names {
		if n == nodestate.KubeVIP && st.VIP == nil || st.IsStopped(n) {
			continue
		}
		out = append(out, n)
	}
	return out
}

// IsName reports whether name is a component of Names.
func IsName(name string) bool {
	for _, n := range Names {
		if n == name {
			return true
		}
	}
	return false
}

// ManifestName reports whether file, a base name in the manifest directory
// or in a snapshot of it, is one of the rendered component manifests
// ("<name>.yaml"), and which component. It is false for a render-derived
// file, a staging leftover, and anything else: kubelet parses every visible
// file in the directory as a pod, but only these are ones this package
// renders, and only these does a manifest-set restore replace.
func ManifestName(file string) (component string, ok bool) {
	name, found := strings.CutSuffix(file, ".yaml")
	if !found || !IsName(name) {
		return "", false
	}
	return name, true
}

// FileName is the manifest file name of component name.
func FileName(name string) string { return name + ".yaml" }
