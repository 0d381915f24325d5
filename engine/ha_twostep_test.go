package engine

// A two-step minor upgrade across the three-node test bed (issue 42): the
// finishing step waits until every control-plane node has taken the
// binary step, by what the cluster records of each.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/haload"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// TestHATwoStepRollout: node-3 commits a patch upgrade (the cluster then
// records it at v1.34.5); node-1 and node-2 take the binary step to 1.35;
// node-1's finishing step is refused while node-3 runs 1.34, not
// ignorably, nothing journaled; node-3 takes the binary step; then all
// three finish at once, taking turns through the rollout lock, and each
// runs 1.35 at its own version. The API answers throughout and no etcd
// member stops (no step changes etcd).
func TestHATwoStepRollout(t *testing.T) {
	c, fs := haCluster(t)
	l := haload.Start(t, c)
	commit := func(what string, res Result, err error) {
		t.Helper()
		if err != nil || res.Outcome != Committed {
			t.Fatalf("%s: %+v %v", what, res, err)
		}
	}
	res, err := fs[2].e.Run(t.Context(), release(fs[2].node.State, false, "", ""), nil)
	commit("node-3's patch upgrade", res, err)
	up := kubeRelease(testbed.NextMinorTag)
	for _, f := range fs[:2] {
		res, err := f.e.RunWith(t.Context(), up, nil, UpgradeOptions{TwoStep: true})
		commit(f.node.State.NodeName+"'s binary step", res, err)
		f.wantEmulated(f.node.State.NodeName+" after its binary step", "kube=1.34")
	}

	before := journalTxns(t, fs[0].j)
	_, err = fs[0].e.Finish(t.Context(), UpgradeOptions{IgnorePreflight: []string{IgnoreAll}})
	var pe *PreflightError
	if !errors.As(err, &pe) || !slices.Contains(checks(pe.Failed), CheckEmulationClusterSkew) || pe.Ignorable() {
		t.Fatalf("node-1's finish while node-3 runs 1.34: %v; want refused by %s, not ignorable", err, CheckEmulationClusterSkew)
	}
	if !strings.Contains(err.Error(), "kube-apiserver on node "+fs[2].node.State.NodeName+" still runs v1.34.5") {
		t.Errorf("the refusal does not name node-3 and its version:\n%v", err)
	}
	if n := journalTxns(t, fs[0].j); n != before {
		t.Errorf("the refused finish journaled a transaction (%d, was %d)", n, before)
	}

	res, err = fs[2].e.RunWith(t.Context(), up, nil, UpgradeOptions{TwoStep: true})
	commit("node-3's binary step", res, err)
	var wg sync.WaitGroup
	results := make([]error, len(fs))
	for i, f := range fs {
		f.mu.Lock()
		f.events = nil
		f.mu.Unlock()
		wg.Go(func() {
			res, err := f.e.Finish(t.Context(), UpgradeOptions{})
			if err == nil && res.Outcome != Committed {
				err = fmt.Errorf("outcome %s", res.Outcome)
			}
			results[i] = err
		})
	}
	wg.Wait()
	load := l.Result(t)
	spans := make([]span, len(fs))
	for i, f := range fs {
		if results[i] != nil {
			t.Fatalf("%s's finish: %v", f.node.State.NodeName, results[i])
		}
		spans[i] = f.span()
		f.wantEmulated(f.node.State.NodeName+" after its finishing step", "-")
		st, err := f.j.NodeState()
		if err != nil {
			t.Fatal(err)
		}
		if ts, ok := versions.PendingTwoStep(resolve.Resolve(st)); ok {
			t.Errorf("%s still emulates %s after finishing", f.node.State.NodeName, ts.Emulated)
		}
		if f.sawEvent("stop", nodestate.Etcd) {
			t.Errorf("%s stopped etcd: no step of a two-step upgrade here changes it", f.node.State.NodeName)
		}
		f.checkConverged(Committed, nil)
	}
	checkOneAtATime(t, spans)
	t.Logf("HA figures: two-step rollout, binary step node by node, finishing step on three nodes at once: writes acked %d/%d, %d lost, API %.2f%%; finish refused on node-1 while node-3 ran 1.34; %s",
		load.Acked, load.Writes, load.Lost, load.API(), spanSummary(spans))
	if load.Lost > 0 {
		t.Errorf("%d of %d acknowledged writes are gone", load.Lost, load.Acked)
	}
}
