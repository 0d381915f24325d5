package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ciq/stratum-upgrade/cluster"
)

// status --cluster --output json has every field, whatever the cluster's
// keys leave out (an open transaction's outcome, a free lock, no halt), and
// validates against docs/schemas/cluster.json. The command itself needs a
// multi-member cluster (make ha runs it); its output is built from a View.
func TestClusterJSONSchema(t *testing.T) {
	sch := loadSchemas(t)["cluster.json"]
	if sch == nil {
		t.Fatal("no docs/schemas/cluster.json")
	}
	at := time.Date(2026, 12, 4, 13, 0, 0, 0, time.UTC)
	views := map[string]*cluster.View{
		"empty": {Revision: 1},
		"open and held": {Revision: 7, Holder: &cluster.Holder{Node: "cp-2", Kind: "upgrade", Since: at},
			Nodes: []cluster.Progress{
				{Node: "cp-1", Txn: "20261204T120000Z-aaaa", Kind: "upgrade", Phase: "committed", Outcome: "committed", To: "kubernetes v1.37.2", Started: at, Updated: at},
				{Node: "cp-2", Txn: "20261204T121000Z-bbbb", Kind: "upgrade", Phase: "applying", Started: at, Updated: at},
			}},
		"halted": {Revision: 9, Halt: &cluster.Halt{Node: "cp-2", Txn: "20261204T121000Z-bbbb", Outcome: "rolled-back", At: at},
			Nodes: []cluster.Progress{{Node: "cp-2", Txn: "20261204T121000Z-bbbb", Kind: "upgrade", Phase: "rolled-back", Outcome: "rolled-back", Reason: "kube-scheduler did not answer", Started: at, Updated: at}}},
	}
	downgrade := &cluster.EtcdDowngrade{Target: "3.6.0", Members: []cluster.DowngradeMember{
		{Name: "cp-1", Version: "3.7.3", StorageVersion: "3.6.0"},
		{Name: "cp-2", Err: "no status"},
		{Name: "cp-3", Version: "3.6.16", StorageVersion: "3.6.0"},
	}}
	for name, v := range views {
		var b bytes.Buffer
		rep := clusterReport{Endpoints: []string{"https://127.0.0.1:2379"}, View: v}
		if name == "halted" {
			rep.Downgrade = downgrade
		}
		if err := writeAs(&b, "json", rep.json()); err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(doc); err != nil {
			t.Errorf("%s: does not validate against cluster.json:\n%s\n%v", name, b.String(), err)
		}
		for _, field := range []string{`"holder":`, `"halt":`, `"nodes":`, `"etcdDowngrade":`} {
			if !strings.Contains(b.String(), field) {
				t.Errorf("%s: %s missing:\n%s", name, field, b.String())
			}
		}
	}
}

// status --cluster prints etcd's downgrade under way: each member's etcd
// and storage version, and the members still to go back.
func TestClusterPrintsTheDowngrade(t *testing.T) {
	d := &cluster.EtcdDowngrade{Target: "3.6.0", Members: []cluster.DowngradeMember{
		{Name: "cp-1", Version: "3.7.3", StorageVersion: "3.6.0"},
		{Name: "cp-2", Err: "no status"},
		{Name: "cp-3", Version: "3.6.16", StorageVersion: "3.6.0"},
	}}
	var b bytes.Buffer
	clusterReport{Endpoints: []string{"https://127.0.0.1:2379"}, View: &cluster.View{Revision: 3}, Downgrade: d}.print(&b)
	out := b.String()
	for _, want := range []string{"ETCD DOWNGRADE to 3.6.0", "cp-1    3.7.3   3.6.0", "still to go back: cp-1 (3.7.3), cp-2 (did not answer)", "rollback --last"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "cp-3 (") {
		t.Errorf("cp-3 runs the target but is listed as behind:\n%s", out)
	}
}
