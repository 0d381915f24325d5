package manifest

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// supportedKube and supportedEtcd are a release of each supported minor: every entry of
// versions.KubernetesMinors and versions.EtcdMinors, at the patch the test
// bed builds or the tables were made from.
var (
	supportedKube = []string{"v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"}
	supportedEtcd = []string{"3.5.35", "3.6.16", "3.7.3"}
)

// TestRenderAtEverySupportedVersion renders the default and cis states
// with the control plane moved to every supported Kubernetes release and
// etcd to every supported etcd release. Render refuses a flag the
// version's table (versions/flags, from the binaries' flag sets) lacks, so
// this pins that the renderer never gives a supported version a flag its
// binary would refuse to start with. A made-up extra arg must be refused
// at each version too: a version without a table would refuse nothing.
func TestRenderAtEverySupportedVersion(t *testing.T) {
	minors := func(vs []string) []string {
		var out []string
		for _, v := range vs {
			out = append(out, versions.MinorOf(version.MustParseGeneric(v)))
		}
		return out
	}
	if got := minors(supportedKube); !slices.Equal(got, versions.KubernetesMinors) {
		t.Fatalf("supportedKube covers %v, versions.KubernetesMinors is %v", got, versions.KubernetesMinors)
	}
	if got := minors(supportedEtcd); !slices.Equal(got, versions.EtcdMinors) {
		t.Fatalf("supportedEtcd covers %v, versions.EtcdMinors is %v", got, versions.EtcdMinors)
	}
	for _, state := range []string{"default", "cis"} {
		for _, kv := range supportedKube {
			for _, ev := range supportedEtcd {
				st := loadState(t, state)
				prof := testProfile(t, st)
				st.KubernetesVersion = kv
				for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
					st.Images[c] = "registry.k8s.io/" + c + ":" + kv
				}
				st.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + ev + "-0"
				t.Run(state+"/"+kv+"/etcd-"+ev, func(t *testing.T) {
					for _, name := range NamesFor(st) {
						if _, err := Render(st, prof, name, ""); err != nil {
							t.Errorf("Render %s: %v", name, err)
						}
						if name == nodestate.KubeVIP {
							continue
						}
						bogus := st.Clone()
						delete(bogus.ExtraArgs, name) // its only extra arg: the bogus one
						bogus.SetExtraArg(name, "no-such-flag-anywhere", "1")
						if _, err := Render(bogus, prof, name, ""); err == nil || !strings.Contains(err.Error(), "has no such flag") {
							t.Errorf("Render %s with --no-such-flag-anywhere = %v, want it refused: no flag table?", name, err)
						}
					}
				})
			}
		}
	}
}
