package engine

// The StaticPodKubelet pre-flight check: every manifest a transaction would
// write, read by the rules of the kubelet that runs it after the upgrade.

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// CheckStaticPodKubelet is the pre-flight check that each rendered
// manifest is a pod the target version's kubelet runs as written: one it
// would refuse (a static pod referencing an API object, refused by 1.34's
// kubelets by default and by 1.37's always; a container's own
// restartPolicy, refused by 1.34's) never runs, and a field it
// would drop (unknown to it) is lost silently. The node's kubelet moves to
// the target minor after its control plane, and then reads every manifest
// again.
//
// It also refuses a container that kubelet would not run with
// imagePullPolicy IfNotPresent (only a patch sets another), naming the
// patch file: kubelet would pull its image again after the stop, which
// the image checks before each stop cannot prevent.
const CheckStaticPodKubelet = "StaticPodKubelet"

// staticPodFindings are the CheckStaticPodKubelet failures of plan's
// manifests, read by the rules of kubelet kubeletVersion (the target's
// Kubernetes version), in roster order.
func staticPodFindings(plan *Plan, kubeletVersion string) []versions.Finding {
	var out []versions.Finding
	for _, c := range plan.Changes {
		problems, err := kubeletpod.Check(c.After, kubeletVersion)
		if err != nil {
			out = append(out, versions.Finding{Check: CheckStaticPodKubelet, Component: c.Component,
				Message: fmt.Sprintf("%s's rendered manifest cannot be checked against kubelet %s's rules: %v", c.Component, kubeletVersion, err)})
			continue
		}
		for _, p := range problems {
			out = append(out, versions.Finding{Check: CheckStaticPodKubelet, Component: c.Component,
				Message: fmt.Sprintf("%s's rendered manifest: %s", c.Component, p.Message)})
		}
		for _, p := range pullPolicies(plan.To, c) {
			out = append(out, versions.Finding{Check: CheckStaticPodKubelet, Component: c.Component,
				Message: fmt.Sprintf("%s's rendered manifest: %s", c.Component, p)})
		}
	}
	return out
}

// pullPolicies is the containers of c's manifest that kubelet would not
// run with imagePullPolicy IfNotPresent, each with the patch file of to
// that set it when c's manifest is to's render (it is in a plan).
func pullPolicies(to *nodestate.NodeState, c Change) []manifest.PullPolicy {
	pod, err := manifest.DecodePod(c.After)
	if err != nil {
		return nil // kubeletpod.Check said so
	}
	bad := manifest.NotIfNotPresent(pod)
	if len(bad) == 0 || to == nil {
		return bad
	}
	if prof, err := manifest.LoadProfile(to); err == nil {
		if named, err := manifest.PullPolicies(to, prof, c.Component); err == nil && len(named) == len(bad) {
			return named
		}
	}
	return bad
}
