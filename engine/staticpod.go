package engine

// The StaticPodKubelet pre-flight check: every manifest a transaction would
// write, read by the rules of the kubelet that runs it after the upgrade.

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/versions"
)

// CheckStaticPodKubelet is the pre-flight check that each rendered
// manifest is a pod the target version's kubelet runs as written: one it
// would refuse (a static pod referencing an API object, refused by 1.34's
// kubelets by default and by 1.37's always) never runs, and a field it
// would drop (unknown to it) is lost silently. The node's kubelet moves to
// the target minor after its control plane, and then reads every manifest
// again.
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
	}
	return out
}
