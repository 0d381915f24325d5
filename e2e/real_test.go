package e2e

// This file holds the scenarios on the real control plane: the real
// kube-apiserver, kube-controller-manager and kube-scheduler (kubebuild)
// and real etcd, each in an image of its own, under the real kubelet.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// The real control plane's upgrade: testdata/states/real.yaml's
// Kubernetes and etcd to the next minor of each.
const (
	realFrom     = "v1.36.3" // testdata/states/real.yaml, kubebuild.Versions[0]
	realTo       = "v1.37.2" // kubebuild.Versions[1]
	realEtcdFrom = "3.6"     // real.yaml's etcd 3.6.16
	realEtcdTo   = "3.7"
)

// removedGate is a feature gate kube-apiserver v1.36.3 accepts (GA and
// locked, it logs "setting GA feature gate. It will be removed in a
// future release") and v1.37.2 no longer has: it exits at once with
// "unrecognized feature gate". A node that set it while it was beta and
// never took it out is the realistic way an apiserver upgrade fails on the
// node's own flags: stratum's pre-flight checks flag names against the
// target's table, not feature-gate names.
const (
	removedGate    = "StructuredAuthenticationConfiguration"
	removedGateErr = "unrecognized feature gate: " + removedGate
)

// realScenarios are the committed upgrade and the rollback of docs/e2e.md
// on the real control plane, on h, after importing RealBinaries' images
// (built if not cached).
func realScenarios(t *testing.T, h *Host, rep *kubeletRuns) {
	if kubebuild.Versions[0] != realFrom || kubebuild.Versions[1] != realTo {
		t.Fatalf("kubebuild.Versions %v: these scenarios upgrade %s -> %s", kubebuild.Versions, realFrom, realTo)
	}
	var importErr error
	var once sync.Once
	imported := func(t *testing.T) {
		t.Helper()
		once.Do(func() {
			start := time.Now()
			archive, written, err := BuildRealImages(t.Context())
			if err != nil {
				importErr = err
				return
			}
			t.Logf("real images %s (written now: %v) in %s", archive, written, time.Since(start).Round(time.Millisecond))
			importErr = h.Import(t.Context(), archive)
		})
		if importErr != nil {
			t.Fatal(importErr)
		}
	}

	// The plain minor upgrade is surge's (surge_test.go), the two-step
	// one twoStepScenario, which checks what this scenario did before: an
	// object written before, new lease holders, etcd at 3.7.
	t.Run("real-rollback-apiserver-rejects-node-flags", func(t *testing.T) {
		imported(t)
		n := resetNodeFrom(t, h, nodeSpec{stateFile: "testdata/states/real.yaml", real: true, mutate: func(st *nodestate.NodeState) {
			st.ExtraArgs[nodestate.KubeAPIServer]["feature-gates"] = nodestate.ArgValues{removedGate + "=true"}
		}})
		api := n.apiClient(t)
		api.checkVersion(t, realFrom)
		api.createConfigMap(t, "stratum-e2e", "before the upgrade")
		before := n.manifests(t)
		rel := n.realRelease(t)
		// Once the engine waits for the new apiserver to answer, look
		// for its reason in the container's log (kubelet drops the log
		// with the pod, so catch it while it is there).
		var gateSeen chan string
		r := n.run(t, runOpts{flags: failingFlags, onEvent: func(ev engine.Event) {
			if gateSeen == nil && ev.Phase == "applying" && ev.Component == nodestate.KubeAPIServer && ev.Step == "wait-active" {
				gateSeen = make(chan string, 1)
				go func() { gateSeen <- h.findPodLog(nodestate.KubeAPIServer, removedGateErr, 40*time.Second) }()
			}
		}}, "run", "--to", rel)
		rep.add(t, fmt.Sprintf("real control plane: kube-apiserver %s exits on the node's --feature-gates=%s=true (removed in 1.37), rollback to %s with etcd's data restored (--active-timeout 45s)", realTo, removedGate, realFrom), r)
		if r.code != 3 {
			if strings.Contains(r.stdout+r.stderr, removedGate) {
				t.Fatalf("run exited %d, want 3 (rolled back); the pre-flight names the gate, so it now refuses what this scenario rolls back: pick another failure:\n%s", r.code, r.output())
			}
			t.Fatalf("run exited %d, want 3 (rolled back):\n%s", r.code, r.output())
		}
		if gateSeen == nil {
			t.Errorf("the engine never waited for the new kube-apiserver")
		} else if line := <-gateSeen; line == "" {
			t.Errorf("kube-apiserver %s's log never said %q: it failed for another reason", realTo, removedGateErr)
		} else {
			t.Logf("kube-apiserver %s: %s", realTo, line)
		}
		checkConverged(t, n, engine.RolledBack, before)
		api.checkVersion(t, realFrom)
		api.checkConfigMap(t, "stratum-e2e", "before the upgrade")
		api.leaseHolders(t, nil)
		if v := etcdclient.Version(t, n); !strings.HasPrefix(v, "3.6.") {
			t.Errorf("etcd serves %s after the rollback, want 3.6", v)
		}
	})

	surgeScenarios(t, h, rep, imported)
}

// realRelease writes the release moving every component of a real node to
// realTo and etcd to the realEtcdTo build.
func (n *node) realRelease(t *testing.T) string {
	t.Helper()
	from, err := etcdbuild.Lookup(realEtcdFrom)
	if err != nil {
		t.Fatal(err)
	}
	if n.st.Images[nodestate.Etcd] != from.Image {
		t.Fatalf("the real node runs %s, these scenarios upgrade etcd from %s", n.st.Images[nodestate.Etcd], from.Image)
	}
	to, err := etcdbuild.Lookup(realEtcdTo)
	if err != nil {
		t.Fatal(err)
	}
	r := engine.Release{APIVersion: engine.ReleaseAPIVersion, Kind: engine.ReleaseKind, KubernetesVersion: realTo,
		Images: map[string]string{nodestate.Etcd: to.Image}}
	for _, c := range kubebuild.Components {
		r.Images[c] = RealImage(c, realTo)
	}
	return n.saveRelease(t, "release-"+realTo, r)
}

// findPodLog polls the logs of component's containers under kubelet's
// podLogsDir for a line containing want, until timeout; it returns the
// line, or "" if none said it.
func (h *Host) findPodLog(component, want string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		logs, _ := filepath.Glob(filepath.Join(h.Root, "pod-logs", "kube-system_"+component+"-*", component, "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, want) {
					return line
				}
			}
		}
		if time.Now().After(deadline) {
			return ""
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// apiClient reaches the node's real apiserver as kubernetes-admin (the
// admin client certificate).
type apiClient struct{ api *testbed.API }

func (n *node) apiClient(t *testing.T) apiClient {
	t.Helper()
	api, err := testbed.AdminAPI(n.st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	return apiClient{api: api}
}

// retry calls f every 500 ms until it succeeds or 30 s passed: a freshly
// started apiserver answers /livez before its bootstrap controllers made
// the kube-system namespace, and its leases come later still.
func retry(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (a apiClient) checkVersion(t *testing.T, want string) {
	t.Helper()
	var v string
	retry(t, "apiserver /version", func() (err error) { v, err = a.api.Version(t.Context()); return err })
	if v != want {
		t.Errorf("apiserver /version says %s, want %s", v, want)
	}
}

func (a apiClient) createConfigMap(t *testing.T, name, value string) {
	t.Helper()
	retry(t, "create ConfigMap kube-system/"+name, func() error {
		return a.api.CreateConfigMap(t.Context(), "kube-system", name, map[string]string{"value": value})
	})
}

func (a apiClient) checkConfigMap(t *testing.T, name, want string) {
	t.Helper()
	var data map[string]string
	retry(t, "read ConfigMap kube-system/"+name, func() (err error) {
		data, err = a.api.ConfigMap(t.Context(), "kube-system", name)
		return err
	})
	if data["value"] != want {
		t.Errorf("ConfigMap kube-system/%s reads %q, want %q", name, data["value"], want)
	}
}

// leaseHolders waits (60 s at most) until the kube-controller-manager and
// kube-scheduler leases have holders, other than not[lease] when not is
// given, and returns them.
func (a apiClient) leaseHolders(t *testing.T, not map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			h, err := a.api.LeaseHolder(t.Context(), lease)
			if err == nil && h != "" && h != not[lease] {
				out[lease] = h
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease kube-system/%s: no new holder after 60s (holder %q, before %q, last error %v)", lease, h, not[lease], err)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("lease kube-system/%s held by %s", lease, out[lease])
	}
	return out
}
