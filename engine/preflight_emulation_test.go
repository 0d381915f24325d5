package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// A target whose extraArgs set --emulated-version is checked against the
// rules of the binaries it runs before anything is written: a version the
// binary refuses is a refusal --ignore-preflight-errors does not let
// through; a kubelet newer than the emulated version is a named check that
// can be ignored; unknown kubelet refuses nothing (issue 42).
func TestPreflightEmulation(t *testing.T) {
	range3 := []string{versions.CheckEmulatedVersionRange, versions.CheckEmulatedVersionRange, versions.CheckEmulatedVersionRange}
	for _, tc := range []struct {
		name, emulated, kubelet string
		only                    string // set on this component alone; "": all three
		ignore                  []string
		want                    []string // failed checks; nil: planned
		ignorable               bool
		says                    string
	}{
		{name: "below the floor", emulated: "kube=1.30", ignore: []string{IgnoreAll}, want: range3,
			says: "--emulated-version=kube=1.30 is outside what a 1.34 binary emulates, 1.31 to 1.34"},
		{name: "patch version", emulated: "kube=1.33.1", want: range3, says: "patch version not allowed"},
		{name: "kube-apiserver alone", emulated: "kube=1.33", only: nodestate.KubeAPIServer, ignorable: true,
			want: []string{versions.CheckEmulationComponentSkew, versions.CheckEmulationComponentSkew},
			says: "kube-scheduler v1.34.5 at 1.34 (no --emulated-version) would be newer than kube-apiserver v1.34.5 emulating 1.33"},
		{name: "kubelet newer", emulated: "kube=1.33", kubelet: "v1.34.4", want: []string{versions.CheckEmulationKubeletSkew}, ignorable: true,
			says: "kubelet v1.34.4 is newer than the version kube-apiserver v1.34.5 emulates, 1.33"},
		{name: "kubelet newer, ignored", emulated: "kube=1.33", kubelet: "v1.34.4", ignore: []string{versions.CheckEmulationKubeletSkew}},
		{name: "kubelet at the emulated minor", emulated: "kube=1.33", kubelet: "v1.33.7"},
		{name: "kubelet unknown", emulated: "kube=1.33"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, store, j, _ := planNodeEdit(t, "default-vip", func(st *nodestate.NodeState) {
				for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
					if tc.only == "" || tc.only == c {
						st.SetExtraArg(c, versions.FlagEmulatedVersion, tc.emulated)
					}
				}
			})
			before := snapshotFiles(t, store.Dir())
			opts := UpgradeOptions{IgnorePreflight: tc.ignore}
			if tc.kubelet != "" {
				opts.Kubelet = func(context.Context) (string, error) { return tc.kubelet, nil }
			}
			_, err := e.PlanWith(t.Context(), preflightRelease("", "v1.34.5"), opts)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("PlanWith: %v, want a plan", err)
				}
				return
			}
			var pe *PreflightError
			if !errors.As(err, &pe) {
				t.Fatalf("PlanWith: %v, want a PreflightError", err)
			}
			if got := checks(pe.Failed); !slices.Equal(got, tc.want) || pe.Ignorable() != tc.ignorable {
				t.Fatalf("failed %q (ignorable %v), want %q (ignorable %v):\n%v", got, pe.Ignorable(), tc.want, tc.ignorable, err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("refusal does not say %q:\n%v", tc.says, err)
			}
			if _, err := e.RunWith(t.Context(), preflightRelease("", "v1.34.5"), nil, opts); !errors.As(err, &pe) {
				t.Fatalf("RunWith: %v, want the refusal", err)
			}
			if n := journalTxns(t, j); n != 0 {
				t.Errorf("a refused run journaled %d transaction(s)", n)
			}
			if after := snapshotFiles(t, store.Dir()); after != before {
				t.Errorf("a refused run changed the manifest directory")
			}
		})
	}
}
