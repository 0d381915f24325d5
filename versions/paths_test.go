package versions

import (
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// node is a node state with etcd's image at tag etcd and the three
// Kubernetes components at api, kcm and sched ("v1.36.3"). An etcd of
// "@3.6.16" is pinned by digest with the version under versions.
func node(etcd, api, kcm, sched string) *nodestate.NodeState {
	st := &nodestate.NodeState{
		KubernetesVersion: api,
		Images: map[string]string{
			nodestate.Etcd:              "registry.k8s.io/etcd:" + etcd + "-0",
			nodestate.KubeAPIServer:     "registry.k8s.io/kube-apiserver:" + api,
			nodestate.ControllerManager: "registry.k8s.io/kube-controller-manager:" + kcm,
			nodestate.Scheduler:         "registry.k8s.io/kube-scheduler:" + sched,
		},
	}
	if v, ok := strings.CutPrefix(etcd, "@"); ok {
		st.Images[nodestate.Etcd] = "registry.k8s.io/etcd@sha256:9a8c1b2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
		st.Versions = map[string]string{nodestate.Etcd: v}
	}
	return st
}

// k is a node with every Kubernetes component at v.
func k(etcd, v string) *nodestate.NodeState { return node(etcd, v, v, v) }

func TestUpgradePath(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to *nodestate.NodeState
		// want is the findings as "Check component", in order; each
		// message must contain every string of msg.
		want []string
		msg  []string
		// unsupported: every finding is Unsupported (none otherwise).
		unsupported bool
	}{
		{name: "patch upgrade", from: k("3.6.16", "v1.36.3"), to: k("3.6.17", "v1.36.4")},
		{name: "nothing moves", from: k("3.6.16", "v1.36.3"), to: k("3.6.16", "v1.36.3")},
		{name: "one minor each", from: k("3.6.16", "v1.36.3"), to: k("3.7.3", "v1.37.2")},

		// etcd one minor at a time.
		{name: "etcd 3.5 -> 3.7", from: k("3.5.35", "v1.36.3"), to: k("3.7.3", "v1.36.3"),
			want: []string{"EtcdMinorSkip etcd"},
			msg:  []string{"etcd 3.5.35 -> 3.7.3 skips 3.6: etcd upgrades one minor at a time; upgrade to a release with etcd 3.6.x first (3.6.11 or later, so the next step to 3.7 is allowed)"}},
		{name: "etcd 3.5.21 -> 3.7 also below the minimum", from: k("3.5.21", "v1.36.3"), to: k("3.7.3", "v1.36.3"),
			want: []string{"EtcdMinorSkip etcd", "EtcdMinimumPatch etcd"}},

		// etcd's minimum patch, both sides of each boundary.
		{name: "etcd 3.5.31 -> 3.6", from: k("3.5.31", "v1.36.3"), to: k("3.6.16", "v1.36.3"),
			want: []string{"EtcdMinimumPatch etcd"},
			msg:  []string{"etcd 3.5.31 -> 3.6.16", "only from 3.5.32 or later", "upgrade to a release with etcd 3.5.32 or a later 3.5 patch first"}},
		{name: "etcd 3.5.32 -> 3.6", from: k("3.5.32", "v1.36.3"), to: k("3.6.16", "v1.36.3")},
		{name: "etcd 3.6.10 -> 3.7", from: k("3.6.10", "v1.36.3"), to: k("3.7.3", "v1.36.3"),
			want: []string{"EtcdMinimumPatch etcd"}, msg: []string{"3.6.11 or later", "etcd 3.6.11 or a later 3.6 patch"}},
		{name: "etcd 3.6.11 -> 3.7", from: k("3.6.11", "v1.36.3"), to: k("3.7.3", "v1.36.3")},
		{name: "etcd 3.5.31 patch upgrade needs no minimum", from: k("3.5.31", "v1.36.3"), to: k("3.5.32", "v1.36.3")},

		// No etcd downgrade, minor or patch.
		{name: "etcd minor downgrade", from: k("3.6.16", "v1.36.3"), to: k("3.5.35", "v1.36.3"),
			want: []string{"EtcdDowngrade etcd"}, msg: []string{"is a downgrade", "etcd 3.6.16 or later"}},
		{name: "etcd patch downgrade", from: k("3.6.16", "v1.36.3"), to: k("3.6.15", "v1.36.3"),
			want: []string{"EtcdDowngrade etcd"}, msg: []string{"patch downgrade", "etcd 3.6.16 or a later 3.6 patch"}},

		// More than one minor down is outside support: never ignorable.
		{name: "etcd two minors down", from: k("3.7.3", "v1.37.2"), to: k("3.5.35", "v1.37.2"),
			want: []string{"EtcdDowngrade etcd"}, unsupported: true,
			msg: []string{"etcd 3.7.3 -> 3.5.35 goes back 2 minors (3.7 -> 3.5)", "cannot be ignored", "one minor at a time, or restore etcd from a backup"}},
		{name: "kubernetes two minors down", from: k("3.6.16", "v1.37.2"), to: k("3.6.16", "v1.35.4"),
			want: []string{"KubernetesDowngrade kube-apiserver", "KubernetesDowngrade kube-controller-manager", "KubernetesDowngrade kube-scheduler"}, unsupported: true,
			msg: []string{"kube-apiserver v1.37.2 -> v1.35.4 goes back 2 minors (1.37 -> 1.35)", "cannot be ignored", "one minor at a time, or restore the control plane from a backup"}},

		// Digest-pinned images: the version comes from the versions field.
		{name: "digest-pinned etcd skip", from: k("@3.5.35", "v1.36.3"), to: k("@3.7.3", "v1.36.3"),
			want: []string{"EtcdMinorSkip etcd"}},
		{name: "digest-pinned etcd below minimum", from: k("@3.5.21", "v1.36.3"), to: k("3.6.16", "v1.36.3"),
			want: []string{"EtcdMinimumPatch etcd"}},
		{name: "digest-pinned etcd allowed", from: k("@3.5.32", "v1.36.3"), to: k("@3.6.16", "v1.36.3")},
		{name: "digest-pinned etcd patch downgrade", from: k("@3.6.16", "v1.36.3"), to: k("@3.6.5", "v1.36.3"),
			want: []string{"EtcdDowngrade etcd"}},

		// Kubernetes one minor at a time, per component.
		{name: "kubernetes 1.34 -> 1.36", from: k("3.6.16", "v1.34.5"), to: k("3.6.16", "v1.36.3"),
			want: []string{"KubernetesMinorSkip kube-apiserver", "KubernetesMinorSkip kube-controller-manager", "KubernetesMinorSkip kube-scheduler"},
			msg:  []string{"v1.34.5 -> v1.36.3 skips 1.35: Kubernetes upgrades one minor at a time; upgrade to a release with", "1.35.x first"}},
		{name: "kubernetes 1.34 -> 1.37", from: k("3.6.16", "v1.34.5"), to: k("3.6.16", "v1.37.2"),
			want: []string{"KubernetesMinorSkip kube-apiserver", "KubernetesMinorSkip kube-controller-manager", "KubernetesMinorSkip kube-scheduler"},
			msg:  []string{"skips 1.35 and 1.36"}},

		// No Kubernetes downgrade, minor or patch; rollback is named.
		{name: "kubernetes minor downgrade", from: k("3.6.16", "v1.37.2"), to: k("3.6.16", "v1.36.3"),
			want: []string{"KubernetesDowngrade kube-apiserver", "KubernetesDowngrade kube-controller-manager", "KubernetesDowngrade kube-scheduler"},
			msg:  []string{"is a downgrade", "a rollback --last puts back", "v1.37.2 or later"}},
		{name: "kubernetes patch downgrade of one", from: k("3.6.16", "v1.36.3"), to: node("3.6.16", "v1.36.3", "v1.36.3", "v1.36.2"),
			want: []string{"KubernetesDowngrade kube-scheduler"}, msg: []string{"kube-scheduler v1.36.3 -> v1.36.2"}},

		// Semantic version order: a pre-release is below its release, build
		// metadata does not count.
		{name: "pre-release of the running version", from: k("3.6.16", "v1.36.3"), to: node("3.6.16", "v1.36.3", "v1.36.3", "v1.36.3-rc.1"),
			want: []string{"KubernetesDowngrade kube-scheduler"}},
		{name: "pre-release of the next patch", from: k("3.6.16", "v1.36.3"), to: node("3.6.16", "v1.36.3", "v1.36.3", "v1.36.4-rc.1")},
		{name: "build metadata", from: k("3.6.16", "v1.36.3"), to: node("3.6.16", "v1.36.3", "v1.36.3", "v1.36.3+k3s1")},

		// The skew policy, in the release.
		{name: "scheduler one minor older", from: k("3.6.16", "v1.36.3"), to: node("3.6.16", "v1.37.2", "v1.37.2", "v1.36.3")},
		{name: "controller-manager newer than apiserver", from: k("3.6.16", "v1.36.3"), to: node("3.6.16", "v1.36.3", "v1.37.2", "v1.36.3"),
			want: []string{"ComponentSkew kube-controller-manager"},
			msg:  []string{"kube-controller-manager v1.37.2 would be newer than kube-apiserver v1.36.3 in the release", "at 1.36 or 1.35"}},
		{name: "patch newer than apiserver is fine", from: k("3.6.16", "v1.36.3"), to: node("3.6.16", "v1.36.3", "v1.36.4", "v1.36.3")},
		// ... and while the upgrade runs: one minor older is allowed, two
		// minors are not.
		{name: "skew one minor while the upgrade runs", from: node("3.6.16", "v1.36.3", "v1.36.3", "v1.36.3"), to: k("3.6.16", "v1.37.2")},
		{name: "skew two minors while the upgrade runs", from: node("3.6.16", "v1.36.3", "v1.35.4", "v1.36.3"), to: k("3.6.16", "v1.37.2"),
			want: []string{"KubernetesMinorSkip kube-controller-manager", "ComponentSkew kube-controller-manager"},
			msg:  []string{"while the upgrade runs", "upgrade kube-controller-manager to 1.36 first"}},
		{name: "skew two minors in the release", from: node("3.6.16", "v1.35.4", "v1.35.4", "v1.35.4"), to: node("3.6.16", "v1.36.3", "v1.35.4", "v1.34.5"),
			want: []string{"KubernetesDowngrade kube-scheduler", "ComponentSkew kube-scheduler"},
			msg:  []string{"more than one minor older than kube-apiserver v1.36.3"}},

		// Unsupported versions in the target.
		{name: "unsupported etcd", from: k("3.7.3", "v1.37.2"), to: k("3.8.0", "v1.37.2"),
			want: []string{"UnsupportedVersion etcd"}, msg: []string{"etcd 3.8.0 is not supported", "etcd at 3.5 to 3.7"}},
		{name: "unsupported kubernetes", from: k("3.6.16", "v1.37.2"), to: node("3.6.16", "v1.38.0", "v1.37.2", "v1.37.2"),
			want: []string{"UnsupportedVersion kube-apiserver"}},
		{name: "unsupported and skipping", from: k("3.5.35", "v1.36.3"), to: k("3.8.0", "v1.36.3"),
			want: []string{"UnsupportedVersion etcd", "EtcdMinorSkip etcd"}, msg: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := UpgradePath(resolve.Resolve(tc.from), resolve.Resolve(tc.to))
			var names []string
			for _, f := range got {
				names = append(names, f.Check+" "+f.Component)
			}
			if !slices.Equal(names, tc.want) {
				t.Fatalf("findings %q, want %q:\n%v", names, tc.want, got)
			}
			for _, m := range tc.msg {
				if !slices.ContainsFunc(got, func(f Finding) bool { return strings.Contains(f.Message, m) }) {
					t.Errorf("no message contains %q:\n%v", m, got)
				}
			}
			for _, f := range got {
				if !slices.Contains(PathChecks, f.Check) {
					t.Errorf("finding of an unknown check %q", f.Check)
				}
				if f.Unsupported != tc.unsupported {
					t.Errorf("%s: Unsupported %v, want %v", f, f.Unsupported, tc.unsupported)
				}
			}
		})
	}
}

// Every entry of EtcdUpgradeMinimum is a patch of its minor, of a
// supported minor that has a next one.
func TestEtcdUpgradeMinimum(t *testing.T) {
	for minor, min := range EtcdUpgradeMinimum {
		if !slices.Contains(EtcdMinors, minor) || !strings.HasPrefix(min, minor+".") {
			t.Errorf("EtcdUpgradeMinimum[%s] = %s", minor, min)
		}
	}
}
