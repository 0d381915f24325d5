package engine

import (
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// etcdNeverPulled is an etcd 3.7 image no node's image map holds: the
// kubelet stand-in never starts it (ErrImageNeverPull), as a real kubelet
// with the image missing and no registry.
const etcdNeverPulled = "registry.k8s.io/etcd:3.7.4-0"

// TestHAEtcdOldBackWhenTheLastMembersNewEtcdNeverStarts: node-1 and node-2
// run etcd 3.7; node-3's new etcd never starts, so the cluster version
// never moved. Its rollback writes the old etcd back (rolled back, not
// rollback-failed with its member down), every member answers at the end
// and node-3's serves 3.6 again; no acknowledged write is lost.
func TestHAEtcdOldBackWhenTheLastMembersNewEtcdNeverStarts(t *testing.T) {
	_, fs, l, last := lastOfThree(t)
	before := last.manifests()
	rel := haRelease(last.node.State, "", "")
	rel.Images[nodestate.Etcd] = etcdNeverPulled
	res, err := last.e.Run(t.Context(), rel, nil)
	if res.Outcome != RolledBack {
		t.Fatalf("node-3: %+v %v, want rolled back with the old etcd written back", res, err)
	}
	last.checkConverged(RolledBack, before)
	for i, f := range fs {
		want := "3.7."
		if i == 2 {
			want = "3.6."
		}
		if v := etcdclient.Version(t, f.node); !strings.HasPrefix(v, want) {
			t.Errorf("%s's etcd serves %q, want %s", f.node.State.NodeName, v, want)
		}
	}
	if v := view(t, fs[0]); v.Halt == nil || v.Halt.Node != "node-3" || v.Halt.Outcome != string(RolledBack) {
		t.Fatalf("rollout %+v: want halted by node-3, rolled back", v)
	}
	l.Check(t, "the last member's new etcd never starts")
}
