package e2e

// A two-step minor upgrade under the real kubelet with the real control
// plane (issue 42): the binary step (1.37 binaries emulating 1.36, etcd
// 3.6 -> 3.7) and its rollback --last to 1.36, each under the client and
// the strict probe of surge's scenarios, with the same figure lines.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// twoStepScenario takes the binary step and rolls it back; figure records
// each figure line. An object written before and the controllers' leases
// are checked across both.
func twoStepScenario(t *testing.T, h *Host, rep *kubeletRuns, imported func(*testing.T), figure func(*testing.T, string)) {
	imported(t)
	oldMinor := strings.TrimPrefix(minorOf(realFrom), "v")
	n := resetNodeFrom(t, h, nodeSpec{stateFile: "testdata/states/real.yaml", real: true, mutate: upgradedOnce})
	api := n.apiClient(t)
	api.checkVersion(t, realFrom)
	api.createConfigMap(t, "stratum-e2e", "before the upgrade")
	holders := api.leaseHolders(t, nil)
	rel := n.realRelease(t)

	var r runResult
	client, strict := measureAvailability(t, n, api, func() { r = n.run(t, runOpts{}, "run", "--to", rel, "--two-step") })
	logTimeline(t, r, client.Start)
	rep.add(t, fmt.Sprintf("real control plane two-step binary step (etcd 3.6.16 -> 3.7.3, kube-apiserver, -controller-manager, -scheduler %s -> %s emulating %s), default deadlines", realFrom, realTo, oldMinor), r)
	figure(t, availability("two-step binary step", client, strict))
	if r.code != 0 {
		t.Fatalf("run --two-step exited %d, want 0:\n%s", r.code, r.output())
	}
	txn := checkConverged(t, n, engine.Committed, nil)
	to := n.journalState(t)
	for _, c := range surged {
		if got := to.ExtraArgs[c]["emulated-version"].Last(); got != "kube="+oldMinor {
			t.Errorf("%s after the binary step: --emulated-version %q, want kube=%s (transaction %s)", c, got, oldMinor, txn.ID)
		}
	}
	api.checkVersion(t, realTo)
	api.checkConfigMap(t, "stratum-e2e", "before the upgrade")
	holders = api.leaseHolders(t, holders)
	if v := etcdclient.Version(t, n); !strings.HasPrefix(v, "3.7.") {
		t.Errorf("etcd serves %s after the binary step, want 3.7", v)
	}
	checkSurgeAvailability(t, r, client, strict, "two-step binary step")

	client, strict = measureAvailabilityAs(t, n, api, "-rollback", func() { r = n.run(t, runOpts{}, "rollback", "--last") })
	logTimeline(t, r, client.Start)
	rep.add(t, fmt.Sprintf("real control plane two-step binary step rolled back (rollback --last: %s binaries, etcd 3.7 -> 3.6 by its downgrade protocol)", realFrom), r)
	figure(t, availability("two-step rollback", client, strict))
	if r.code != 0 {
		t.Fatalf("rollback --last exited %d, want 0:\n%s", r.code, r.output())
	}
	checkConverged(t, n, engine.Committed, nil)
	api.checkVersion(t, realFrom)
	api.checkConfigMap(t, "stratum-e2e", "before the upgrade")
	api.leaseHolders(t, holders)
	if v := etcdclient.Version(t, n); !strings.HasPrefix(v, "3.6.") {
		t.Errorf("etcd serves %s after the rollback, want 3.6", v)
	}
	if st := n.journalState(t); st.ExtraArgs[nodestate.KubeAPIServer]["emulated-version"] != nil {
		t.Errorf("after the rollback kube-apiserver still has --emulated-version %v", st.ExtraArgs[nodestate.KubeAPIServer]["emulated-version"])
	}
}
