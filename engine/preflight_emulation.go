package engine

// The emulation pre-flight checks: a target whose extraArgs set a
// compatibility-version flag (--emulated-version, KEP-4330) on
// kube-apiserver, kube-controller-manager or kube-scheduler is checked
// against the rules of the binaries that will run it (versions.
// CheckEmulation), and the node's running kubelet against the version
// kube-apiserver emulates, before anything is written.

import (
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// emulationFindings are the EmulatedVersionRange, EmulationFeatureGates,
// EmulationAlphaGates, EmulationComponentSkew and EmulationKubeletSkew
// failures of the target state to (target is its resolution); live is the
// version of the kubelet running on the node, "" when unknown (then the
// skew is not checked: an unknown version refuses nothing). Only the
// running kubelet is checked: the target's Kubernetes version names the
// binaries, and a binary step runs them emulating the old minor while the
// kubelet stays at it.
func emulationFindings(target *resolve.Node, to *nodestate.NodeState, live string) []versions.Finding {
	var out, kubelet []versions.Finding
	binaries := map[string]*version.Version{}
	for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		if target.Image(c) == "" {
			continue
		}
		v, err := target.Version(c)
		if err != nil || v == nil {
			continue // the node state's validation and UpgradePath say why
		}
		binaries[c] = v
		args := to.ExtraArgs[c]
		out = append(out, versions.CheckEmulation(c, v, args)...)
		if c == nodestate.KubeAPIServer {
			kubelet = versions.CheckEmulationKubelet(v, args, live)
		}
	}
	out = append(out, versions.CheckEmulationSkew(binaries, to.ExtraArgs)...)
	return append(out, kubelet...)
}
