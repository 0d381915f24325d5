package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// A downgrade of more than one Kubernetes minor is outside what any
// rollback path supports: refused whatever --ignore-preflight-errors says,
// while one minor back can still be let through (issue 37, defect I).
func TestPreflightDowngradeBeyondOneMinorNotIgnorable(t *testing.T) {
	at := func(v string) func(*nodestate.NodeState) {
		return func(st *nodestate.NodeState) {
			st.KubernetesVersion = v
			for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
				st.Images[c] = "registry.k8s.io/" + c + ":" + v
			}
		}
	}
	for _, tc := range []struct {
		name, from string
		ignore     []string
		refused    bool
	}{
		{name: "two minors down, all ignored", from: "v1.36.3", ignore: []string{IgnoreAll}, refused: true},
		{name: "two minors down, the check named", from: "v1.36.3", ignore: []string{"KubernetesDowngrade"}, refused: true},
		{name: "one minor down, ignored", from: "v1.35.4", ignore: []string{IgnoreAll}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _, j, _ := planNodeEdit(t, "default-vip", at(tc.from))
			// The release is v1.34.5; etcd is left as it is.
			_, err := e.PlanWith(t.Context(), preflightRelease("", "v1.34.5"), UpgradeOptions{IgnorePreflight: tc.ignore})
			var pe *PreflightError
			if !tc.refused {
				if err != nil {
					t.Fatalf("PlanWith one minor down, ignored: %v", err)
				}
				return
			}
			if !errors.As(err, &pe) {
				t.Fatalf("PlanWith: %v, want a PreflightError", err)
			}
			if got := checks(pe.Failed); !slices.Equal(got, []string{"KubernetesDowngrade", "KubernetesDowngrade", "KubernetesDowngrade"}) || pe.Ignorable() {
				t.Fatalf("failed %q (ignorable %v), want KubernetesDowngrade of each component, not ignorable:\n%v", got, pe.Ignorable(), err)
			}
			for _, s := range []string{"goes back 2 minors (1.36 -> 1.34)", "cannot be ignored", "restore the control plane from a backup"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal does not say %q:\n%v", s, err)
				}
			}
			if _, err := e.RunWith(t.Context(), preflightRelease("", "v1.34.5"), nil, UpgradeOptions{IgnorePreflight: tc.ignore}); !errors.As(err, &pe) {
				t.Fatalf("RunWith: %v, want the refusal", err)
			}
			if n := journalTxns(t, j); n != 0 {
				t.Errorf("a refused run journaled %d transaction(s)", n)
			}
		})
	}
}
