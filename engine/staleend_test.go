package engine

// The next command on a node closes its record in the cluster left open
// for a transaction its journal ended before it changed anything (a begin
// whose write landed after the node read it back as not recorded), with
// the journal's outcome and no halt (issue 37, defect G).

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/journal"
)

// lateBegin journals a transaction of n rolled back before it changed
// anything, and records it open in c's cluster, as the begin's late write
// leaves it. It returns the transaction's id and a coordinator through
// another member.
func lateBegin(t *testing.T, c *etcdcluster.Cluster, n *memNode) (string, *cluster.Coordinator) {
	t.Helper()
	from, err := n.st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	txn, err := n.j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: from, To: from})
	if err != nil {
		t.Fatal(err)
	}
	reason := "the cluster could not record the transaction, so nothing was changed: a test's"
	if err := n.j.Update(txn.ID, func(t *journal.Txn) error { t.Phase, t.Reason = journal.PhaseRollingBack, reason; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := n.j.Finish(txn.ID, journal.PhaseRolledBack, reason, nil); err != nil {
		t.Fatal(err)
	}
	co, err := cluster.Connect(t.Context(), cluster.Config{Local: etcddata.ClientConfig{Endpoint: c.Members[1].ClientURL, DialTimeout: 5 * time.Second}, Node: "observer", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	now := time.Now().UTC()
	b, err := json.Marshal(cluster.Progress{Node: n.st.NodeName, Txn: txn.ID, Kind: journal.KindUpgrade, Phase: "planned", Started: now, Updated: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := co.Client().Put(t.Context(), cluster.Prefix+"nodes/"+n.st.NodeName, string(b)); err != nil {
		t.Fatal(err)
	}
	return txn.ID, co
}

// closedWithoutHalt fails t unless the cluster shows id closed rolled back
// (or replaced by a later transaction of the node) and no halt.
func closedWithoutHalt(t *testing.T, co *cluster.Coordinator, node, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := co.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Halt != nil {
		t.Fatalf("halt %+v: a transaction that did nothing halted the rollout", v.Halt)
	}
	if slices.ContainsFunc(v.Nodes, func(p cluster.Progress) bool { return p.Node == node && p.Txn == id && p.Open() }) {
		t.Fatalf("the cluster still shows %s open: %+v", id, v.Nodes)
	}
}

func TestNextCommandClosesALateBegin(t *testing.T) {
	t.Run("resume", func(t *testing.T) {
		c := etcdcluster.Start(t, 3, "3.6")
		n := newMemNode(t)
		memberOfCluster(t, n, c.Members[0])
		id, co := lateBegin(t, c, n)
		res, err := n.engine(nil).Resume(t.Context())
		if err != nil || res.Outcome != Nothing || res.Txn != id {
			t.Fatalf("resume: %+v %v; want nothing to resume, the end of %s recorded", res, err, id)
		}
		closedWithoutHalt(t, co, n.st.NodeName, id)
		p, err := co.Node(t.Context(), n.st.NodeName)
		if err != nil || p == nil || p.Outcome != string(RolledBack) || !strings.Contains(p.Reason, "ended before it changed anything") {
			t.Fatalf("node's progress %+v %v; want %s closed rolled back, before it changed anything", p, err, id)
		}
	})
	t.Run("run", func(t *testing.T) {
		c := etcdcluster.Start(t, 3, "3.6")
		n := newMemNode(t)
		memberOfCluster(t, n, c.Members[0])
		id, co := lateBegin(t, c, n)
		res, err := n.engine(nil).Run(t.Context(), release(n.st, false, "", standin.ModeHealthy), nil)
		if err != nil || res.Outcome != Committed {
			t.Fatalf("run: %+v %v; want committed", res, err)
		}
		closedWithoutHalt(t, co, n.st.NodeName, id)
		if !slices.ContainsFunc(n.events, func(ev string) bool {
			return strings.Contains(ev, "cluster-end") && strings.Contains(ev, id) && strings.Contains(ev, "ended before it changed anything")
		}) {
			t.Fatalf("no event records the end of %s in the cluster:\n%s", id, strings.Join(n.events, "\n"))
		}
	})
}
