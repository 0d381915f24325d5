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
	for name, v := range views {
		var b bytes.Buffer
		if err := writeAs(&b, "json", clusterReport{Endpoints: []string{"https://127.0.0.1:2379"}, View: v}.json()); err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(doc); err != nil {
			t.Errorf("%s: does not validate against cluster.json:\n%s\n%v", name, b.String(), err)
		}
		for _, field := range []string{`"holder":`, `"halt":`, `"nodes":`} {
			if !strings.Contains(b.String(), field) {
				t.Errorf("%s: %s missing:\n%s", name, field, b.String())
			}
		}
	}
}
