package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
)

// history TXN says how a rollback took etcd's data (issue 30): the path
// and why, in the text and in its JSON (valid against history-txn.json),
// and the records of the new etcd steps read as sentences.
func TestHistoryTxnShowsTheEtcdPath(t *testing.T) {
	at := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	recs := []journal.Record{
		{Seq: 1, Time: at, Phase: journal.PhaseApplying, Step: journal.StepEtcdAnswered, Component: "etcd"},
		{Seq: 2, Time: at, Phase: journal.PhaseRollingBack, Step: journal.StepEtcdData, Component: "etcd", EtcdData: journal.EtcdDowngrade, Why: "etcd 3.6 wrote to it and answers"},
		{Seq: 3, Time: at, Phase: journal.PhaseRollingBack, Step: journal.StepEtcdData, Component: "etcd", EtcdData: journal.EtcdRestore, Why: "the backup (revision 7) is restored, losing 42 revisions"},
	}
	txn := &journal.Txn{ID: "20261205T030000Z-1a2b", Kind: journal.KindUpgrade, Phase: journal.PhaseRolledBack, Started: at, Updated: at, Ended: at, Changed: []string{"etcd"}}
	d := txnDetail{txnInfo: txnSummary(txn, recs), EtcdPath: etcdPathOf(recs), Records: recordsOut(recs)}
	if d.EtcdPath == nil || d.EtcdPath.Path != "restored" || !strings.Contains(d.EtcdPath.Why, "losing 42 revisions") {
		t.Fatalf("etcd path %+v, want the last decision: restored, losing 42 revisions", d.EtcdPath)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	newJSONNode(t).validate("history TXN", "history-txn.json", string(b))
	var out bytes.Buffer
	if err := d.print(&out, func(s string) string { return s }); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"etcd data:    restored: the backup (revision 7) is restored, losing 42 revisions", "etcd-answered: the new etcd answered", "etcd-data: etcd's data is downgrade: etcd 3.6 wrote"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("history TXN text lacks %q:\n%s", want, out.String())
		}
	}
	if etcdPathOf(recs[:1]) != nil {
		t.Error("an etcd path without an etcd-data decision")
	}
	// A rollback --last that moved etcd down a minor and committed.
	down := []journal.Record{{Seq: 1, Time: at, Phase: journal.PhaseApplying, Step: journal.StepEtcdDowngraded, Component: "etcd", Why: "storage version 3.5.0 at revision 90"}}
	if p := etcdPathOf(down); p == nil || p.Path != "downgraded" || !strings.Contains(p.Why, "storage version 3.5.0") {
		t.Errorf("etcd path of a committed step down %+v, want downgraded with its storage version", p)
	}
}
