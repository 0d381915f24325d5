package engine

// A 3.5 member that served the v2 API, upgraded to 3.6 on the real binaries
// (issue 30): its WAL holds v2 writes after its last snapshot, which etcd
// 3.6 refuses at start.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// v2Do sends method (PUT: key = value; DELETE) for key through etcd's v2
// API (etcd 3.5 with --enable-v2), with the node's etcd client
// certificate.
func v2Do(t *testing.T, n etcdclient.Node, method, key, value string) {
	t.Helper()
	tlsCfg, err := n.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(n.EtcdEndpoint(), "/")+"/v2/keys/"+key, strings.NewReader(url.Values{"value": {value}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("v2 %s %s: %v", method, key, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		t.Fatalf("v2 %s %s: %s %s", method, key, resp.Status, body)
	}
}

// TestRealEtcdV2WALUpgradesTo36: etcd 3.5 with the v2 API on takes v2
// writes. While they are in its v2 store, the plan to 3.6 is refused by
// EtcdV2Store, naming them: etcd 3.6 refuses to start on custom v2 content
// ("detected disallowed custom content in v2store"), and a forced snapshot
// would only keep it (the test's first run found that). The operator
// deletes them through the v2 API and turns the v2 API off (an apply of
// the node state without --enable-v2, which 3.6 no longer has: a restart
// of the same 3.5, no new snapshot). The writes are still in the WAL after
// the last snapshot, the hazard of etcd-io/etcd#20809 ("detected
// disallowed v2 WAL"): the plan says a snapshot is forced; the upgrade to
// 3.6 journals forcing then covered, commits, and the key written through
// v3 at 3.5 reads back.
func TestRealEtcdV2WALUpgradesTo36(t *testing.T) {
	kube := kubebuild.Versions[0]
	needReal(t)
	f := realFixture(t, "testdata/states/real.yaml", kube, "registry.k8s.io/etcd:3.5.35-0", func(st *nodestate.NodeState) {
		if st.ExtraArgs == nil {
			st.ExtraArgs = map[string]map[string]nodestate.ArgValues{}
		}
		if st.ExtraArgs[nodestate.Etcd] == nil {
			st.ExtraArgs[nodestate.Etcd] = map[string]nodestate.ArgValues{}
		}
		st.ExtraArgs[nodestate.Etcd]["enable-v2"] = nodestate.ArgValues{"true"}
	})
	etcdclient.Put(t, f.node, "v2-wal", "3.5")
	for i := range 3 {
		v2Do(t, f.node, http.MethodPut, fmt.Sprintf("stratum-v2-%d", i), "written through the v2 API")
	}
	v2api := func(on bool) {
		t.Helper()
		cur, err := f.j.NodeState()
		if err != nil {
			t.Fatal(err)
		}
		to := cur.Clone()
		if on {
			to.ExtraArgs[nodestate.Etcd]["enable-v2"] = nodestate.ArgValues{"true"}
		} else {
			delete(to.ExtraArgs[nodestate.Etcd], "enable-v2")
		}
		if res, err := f.e.Apply(t.Context(), to, UpgradeOptions{}); err != nil || res.Outcome != Committed {
			t.Fatalf("apply with --enable-v2 %v: %+v %v", on, res, err)
		}
	}
	// Off first: a node state with --enable-v2 does not render for 3.6.
	v2api(false)
	rel := &Release{APIVersion: ReleaseAPIVersion, Kind: ReleaseKind, KubernetesVersion: kube, Images: map[string]string{nodestate.Etcd: "registry.k8s.io/etcd:3.6.16-0"}}
	var pe *PreflightError
	if _, err := f.e.Plan(rel); !errors.As(err, &pe) || pe.Failed[0].Check != CheckEtcdV2Store || !strings.Contains(err.Error(), "/1/stratum-v2-0") {
		t.Fatalf("plan with custom v2 content: %v, want refused by %s naming /1/stratum-v2-0", err, CheckEtcdV2Store)
	}
	v2api(true)
	for i := range 3 {
		v2Do(t, f.node, http.MethodDelete, fmt.Sprintf("stratum-v2-%d", i), "")
	}
	v2api(false)
	dataDir := f.node.State.Etcd.DataDir
	scan, err := etcddata.ScanWAL(dataDir)
	if err != nil || len(scan.Hazards("3.6")) == 0 {
		t.Fatalf("the WAL holds no hazard for 3.6 after v2 writes (%+v, %v): the test does not reach the remediation", scan, err)
	}
	t.Logf("WAL after the last snapshot (index %d): %d entries, %d disallowed v2 requests", scan.SnapshotIndex, scan.Entries, scan.DisallowedV2)
	plan, err := f.e.Plan(rel)
	if err != nil || !strings.Contains(plan.EtcdSnapshotForced(), "etcd-io/etcd#20809") {
		t.Fatalf("the plan does not say a snapshot is forced for etcd-io/etcd#20809 (%v)", err)
	}
	t0 := time.Now()
	res, err := f.e.Run(t.Context(), rel, nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run to 3.6: %+v %v", res, err)
	}
	recs, err := f.j.Records(res.Txn)
	if err != nil {
		t.Fatal(err)
	}
	var stages []string
	for _, r := range recs {
		if r.Step == journal.StepEtcdSnapshot {
			stages = append(stages, r.Why)
		}
	}
	if !slices.Equal(stages, []string{journal.EtcdSnapshotForcing, journal.EtcdSnapshotCovered}) {
		t.Fatalf("etcd-snapshot records %v, want forcing then covered", stages)
	}
	t.Logf("3.5 with v2 WAL entries -> 3.6 committed in %s, the snapshot forced first", time.Since(t0).Round(time.Millisecond))
	if v := etcdclient.Version(t, f.node); v != "3.6.16" {
		t.Fatalf("etcd reports %s, want 3.6.16", v)
	}
	if got := etcdclient.Get(t, f.node, "v2-wal"); got != "3.5" {
		t.Fatalf("key written at 3.5 reads %q at 3.6", got)
	}
}
