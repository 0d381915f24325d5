package engine

// The emulation pre-flight checks: a target whose extraArgs set a
// compatibility-version flag (--emulated-version, KEP-4330) on
// kube-apiserver, kube-controller-manager or kube-scheduler is checked
// against the rules of the binaries that will run it (versions.
// CheckEmulation), and the node's running kubelet against the version
// kube-apiserver emulates, before anything is written.

import (
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// emulationFindings are the EmulatedVersionRange, EmulationFeatureGates,
// EmulationAlphaGates and EmulationKubeletSkew failures of the target
// state to (target is its resolution), in roster order; live is the
// version of the kubelet running on the node, "" when unknown (then the
// skew is not checked: an unknown version refuses nothing). Only the
// running kubelet is checked: the target's Kubernetes version names the
// binaries, and a binary step runs them emulating the old minor while the
// kubelet stays at it.
func emulationFindings(target *resolve.Node, to *nodestate.NodeState, live string) []versions.Finding {
	var out []versions.Finding
	for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		if target.Image(c) == "" {
			continue
		}
		v, err := target.Version(c)
		if err != nil || v == nil {
			continue // the node state's validation and UpgradePath say why
		}
		args := to.ExtraArgs[c]
		out = append(out, versions.CheckEmulation(c, v, args)...)
		if c == nodestate.KubeAPIServer {
			out = append(out, versions.CheckEmulationKubelet(v, args, live)...)
		}
	}
	return out
}
