package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/cluster"
)

// status --cluster names the node and transaction that enabled etcd's
// downgrade (its progress record says so), or that none on record did.
func TestClusterPrintsWhoEnabledTheDowngrade(t *testing.T) {
	d := &cluster.EtcdDowngrade{Target: "3.5.0", Members: []cluster.DowngradeMember{{Name: "cp-1", Version: "3.6.16", StorageVersion: "3.6.0"}}}
	v := &cluster.View{Revision: 3, Nodes: []cluster.Progress{
		{Node: "cp-1", Txn: "20261206T230000Z-aaaa", Kind: cluster.KindRollbackLast, Phase: "applying"},
		{Node: "cp-2", Txn: "20261206T230100Z-bbbb", Kind: cluster.KindRollbackLast, Phase: "applying", EtcdDowngrade: "3.5"},
	}}
	var b bytes.Buffer
	clusterReport{View: v, Downgrade: d}.print(&b)
	if want := "enabled by cp-2, transaction 20261206T230100Z-bbbb"; !strings.Contains(b.String(), want) {
		t.Errorf("missing %q:\n%s", want, b.String())
	}
	v.Nodes[1].EtcdDowngrade = ""
	b.Reset()
	clusterReport{View: v, Downgrade: d}.print(&b)
	if want := "enabled by no stratum-upgrade transaction"; !strings.Contains(b.String(), want) {
		t.Errorf("missing %q:\n%s", want, b.String())
	}
}
