package engine

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// kubeRelease moves kube-apiserver, kube-controller-manager and
// kube-scheduler to their stand-ins at tag.
func kubeRelease(tag string) *Release {
	r := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: tag, Images: map[string]string{}}
	for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		r.Images[c] = testbed.ModeImage(c, tag, standin.ModeHealthy)
	}
	return r
}

// emulated is each Kubernetes component's --emulated-version in the
// journal's node state and in its manifest on disk ("-" for none).
func (f *fixture) emulated() (state, disk []string) {
	f.t.Helper()
	st, err := f.j.NodeState()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		v := st.ExtraArgs[c][versions.FlagEmulatedVersion].Last()
		if v == "" {
			v = "-"
		}
		state = append(state, v)
		b, err := f.node.Store.Read(c)
		if err != nil {
			f.t.Fatal(err)
		}
		d := "-"
		if _, after, ok := strings.Cut(string(b), "--"+versions.FlagEmulatedVersion+"="); ok {
			d, _, _ = strings.Cut(after, "\n")
		}
		disk = append(disk, d)
	}
	return state, disk
}

func (f *fixture) wantEmulated(when, want string) {
	f.t.Helper()
	state, disk := f.emulated()
	for i := range state {
		if state[i] != want || disk[i] != want {
			f.t.Fatalf("%s: --emulated-version in the node state %v, on disk %v; want %s on the three", when, state, disk, want)
		}
	}
}

// TestTwoStepOnTestBed takes a minor move in two steps on the test bed:
// the binary step commits with the three components emulating the old
// minor, and its rollback --last takes the node back to the old binaries;
// taken again, the finishing step drops the emulation and its rollback
// --last puts it back; finished again, a move back to the old binaries is
// refused (EmulationFinished, not ignorable), nothing written.
func TestTwoStepOnTestBed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testbed.Options{})
	// Six transactions: a short soak, as what is soaked is not the point.
	dl := testDeadlines
	dl.Soak = 200 * time.Millisecond
	f.e = f.engine(f.node.Scanner, dl)
	up := kubeRelease(testbed.NextMinorTag)
	commit := func(what string, res Result, err error) {
		t.Helper()
		if err != nil || res.Outcome != Committed {
			t.Fatalf("%s: %+v %v", what, res, err)
		}
	}
	if _, err := f.e.Finish(t.Context(), UpgradeOptions{}); !errors.Is(err, ErrNothingToDo) {
		t.Fatalf("finish with no two-step upgrade: %v, want nothing to do", err)
	}
	res, err := f.e.RunWith(t.Context(), up, nil, UpgradeOptions{TwoStep: true})
	commit("binary step", res, err)
	f.wantEmulated("after the binary step", "kube=1.34")
	if _, err := f.e.RunWith(t.Context(), up, nil, UpgradeOptions{TwoStep: true}); !errors.Is(err, ErrNoMinorMove) {
		t.Fatalf("the binary step again: %v, want ErrNoMinorMove", err)
	}
	res, err = f.e.RollbackLast(t.Context())
	commit("rollback --last of the binary step", res, err)
	f.wantEmulated("after the binary step's rollback", "-")
	if st, _ := f.j.NodeState(); st.KubernetesVersion != "v1.34.4" {
		t.Fatalf("after the binary step's rollback the node runs %s, want v1.34.4", st.KubernetesVersion)
	}

	res, err = f.e.RunWith(t.Context(), up, nil, UpgradeOptions{TwoStep: true})
	commit("binary step again", res, err)
	res, err = f.e.Finish(t.Context(), UpgradeOptions{})
	commit("finish", res, err)
	f.wantEmulated("after the finishing step", "-")
	res, err = f.e.RollbackLast(t.Context())
	commit("rollback --last of the finishing step", res, err)
	f.wantEmulated("after the finishing step's rollback", "kube=1.34")
	res, err = f.e.Finish(t.Context(), UpgradeOptions{})
	commit("finish again", res, err)

	before := f.manifests()
	back := kubeRelease("v1.34.4")
	_, err = f.e.RunWith(t.Context(), back, nil, UpgradeOptions{IgnorePreflight: []string{IgnoreAll}})
	var pe *PreflightError
	if !errors.As(err, &pe) || len(pe.Failed) == 0 || pe.Failed[0].Check != versions.CheckEmulationFinished || pe.Ignorable() {
		t.Fatalf("back to 1.34 after the finish: %v, want an EmulationFinished refusal no flag lets through", err)
	}
	if !strings.Contains(err.Error(), "after the two-step upgrade's finishing step") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if after := f.manifests(); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Error("the refused move changed the manifest directory")
	}
}

// On a multi-member cluster the finishing step waits for every
// control-plane node's binary step: refused, not ignorably, while cp-2's
// kube-apiserver runs 1.35 by its record in the cluster (or its mirror
// pod), ignorably while cp-2 is known from neither, and taken once cp-2
// runs 1.36.
func TestFinishWaitsForEveryControlPlaneNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		cp2                string // cp-2's recorded kube-apiserver version, "" for none
		live               []LiveAPIServer
		refused, ignorable bool
	}{
		{name: "cp-2 recorded at 1.35", cp2: "v1.35.4", refused: true},
		{name: "cp-2's mirror pod at 1.35", live: []LiveAPIServer{{Node: "cp-2", Versions: []string{"v1.35.4"}}}, refused: true},
		{name: "cp-2 known from neither", live: []LiveAPIServer{{Node: "cp-2", Unread: "no kube-apiserver mirror pod on it"}}, ignorable: true},
		{name: "cp-2 took the binary step", cp2: "v1.36.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a cluster of its own
			c := etcdcluster.Start(t, 3, "3.6")
			n := newMemNode(t)
			kubeAt(n.st, "v1.36.3")
			for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
				n.st.SetExtraArg(comp, versions.FlagEmulatedVersion, "kube=1.35")
			}
			memberOfCluster(t, n, c.Members[0])
			if tc.cp2 != "" {
				record(t, c, "cp-2", "committed", "v1.35.4", tc.cp2)
			}
			e := n.engine(nil)
			if tc.live != nil {
				e.apiServers = func(context.Context) ([]LiveAPIServer, error) { return tc.live, nil }
			}
			_, err := e.Finish(t.Context(), UpgradeOptions{})
			var pe *PreflightError
			refused := errors.As(err, &pe) && slices.Contains(checks(pe.Failed), CheckEmulationClusterSkew)
			if refused != (tc.refused || tc.ignorable) {
				t.Fatalf("finish: %v; want refused by %s: %v", err, CheckEmulationClusterSkew, tc.refused || tc.ignorable)
			}
			if refused {
				if pe.Ignorable() != tc.ignorable {
					t.Fatalf("finish refused, ignorable %v, want %v:\n%v", pe.Ignorable(), tc.ignorable, err)
				}
				if k := journalTxns(t, n.j); k != 0 {
					t.Fatalf("a refused finish journaled %d transaction(s)", k)
				}
				if tc.refused && !strings.Contains(err.Error(), "kube-apiserver on node cp-2 still runs v1.35.4") {
					t.Errorf("the refusal does not name cp-2 and its version:\n%v", err)
				}
				return
			}
			if k := journalTxns(t, n.j); k != 1 {
				t.Fatalf("finish journaled %d transaction(s), want 1 (%v)", k, err)
			}
		})
	}
}
