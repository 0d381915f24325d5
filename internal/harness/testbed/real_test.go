package testbed

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestRealControlPlane brings up a node in real mode for each
// kubebuild.Versions version (testdata/states/real.yaml, etcd 3.6.16):
// the renderer's manifests run the real kube-apiserver,
// kube-controller-manager and kube-scheduler, every component becomes
// active, the apiserver reports its version, and the controller-manager
// and the scheduler take their leader leases. A version not built is
// skipped unless STRATUM_REAL=1, which builds it (minutes each; make
// real-binaries builds them ahead).
func TestRealControlPlane(t *testing.T) {
	for _, v := range kubebuild.Versions {
		t.Run(v, func(t *testing.T) {
			if os.Getenv("STRATUM_REAL") == "" {
				t.Skip("needs the real control plane: make test-real runs it (STRATUM_REAL=1 builds what is missing first, minutes)")
			}
			n := Start(t, Options{
				StateFile: "testdata/states/real.yaml",
				Real:      true,
				Mutate: func(st *nodestate.NodeState) {
					st.KubernetesVersion = v
					for _, c := range kubebuild.Components {
						st.Images[c] = Repos[c] + ":" + v
					}
				},
				ActiveTimeout: 3 * time.Minute,
			})
			api, err := n.API()
			if err != nil {
				t.Fatal(err)
			}
			defer api.Close()
			if got, err := api.Version(t.Context()); err != nil || got != v {
				t.Fatalf("apiserver /version %q (%v), want %s", got, err, v)
			}
			for _, lease := range []string{"kube-controller-manager", "kube-scheduler"} {
				holder, err := waitLease(t.Context(), api, lease, 2*time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("lease kube-system/%s held by %s", lease, holder)
			}
			// What the binaries said of the rendered flags: a deprecated
			// flag is accepted today and rejected by a later version.
			logs, _ := filepath.Glob(filepath.Join(n.KubeletDir, "logs", "*", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				for _, line := range strings.Split(string(b), "\n") {
					if strings.Contains(line, "deprecated") || strings.Contains(line, "Flag --") {
						t.Logf("%s: %s", filepath.Base(filepath.Dir(l)), line)
					}
				}
			}
		})
	}
}

// waitLease waits until the Lease kube-system/name has a holder and
// returns it.
func waitLease(ctx context.Context, api *API, name string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		var h string
		h, last = api.LeaseHolder(ctx, name)
		if last == nil && h != "" {
			return h, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return "", fmt.Errorf("lease kube-system/%s: no holder after %s (last: %v)", name, timeout, last)
}
