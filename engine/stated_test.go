package engine

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// TestStatedMembersWhenEtcdCannotAnswer: etcd does not answer and the node
// has no record of its member count. With the count stated (what
// --etcd-members sets), the run is driven as a single member's and
// commits; the stated count is kept in cluster-members.json with who
// stated it and when, and a later command without the flag goes by it,
// naming where it came from.
func TestStatedMembersWhenEtcdCannotAnswer(t *testing.T) {
	n := newMemNode(t)
	unknownTopology(t, n)
	e := n.engine(nil)
	e.coord.Members = 1
	before := time.Now().UTC().Add(-time.Second)
	res, err := e.Run(t.Context(), release(n.st, false, "", ""), nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run with --etcd-members 1 and etcd down: %+v %v; want committed", res, err)
	}
	known, err := cluster.LoadMembers(filepath.Join(n.root, "state", cluster.MembersFile))
	if err != nil || known == nil {
		t.Fatalf("kept member count: %+v %v", known, err)
	}
	if known.Count != 1 || known.StatedBy != statedByFlag || known.At.Before(before) {
		t.Errorf("kept member count: %+v; want 1, stated by %q, now", known, statedByFlag)
	}

	top, c, err := n.engine(nil).topology(t.Context(), n.st, "")
	if err != nil || c != nil || top.members != 1 || !strings.Contains(top.source, "stated by "+statedByFlag) {
		t.Fatalf("topology without the flag, etcd still down: %+v %v %v; want 1 member, from the stated count", top, c, err)
	}
}

// TestLiveMembersWinOverStated: etcd answers with one member while the
// operator states three, and the record kept says three stated before.
// The live list wins: the topology is a single member's, both
// disagreements are reported, and the record is replaced by what etcd
// said (no longer marked stated).
func TestLiveMembersWinOverStated(t *testing.T) {
	c := etcdcluster.Start(t, 1, "3.6")
	n := newMemNode(t)
	reach(n, c.Members[0])
	path := filepath.Join(n.root, "state", cluster.MembersFile)
	stated := cluster.Members{Count: 3, At: time.Now().UTC().Add(-time.Hour), StatedBy: statedByFlag}
	if err := cluster.SaveMembers(path, stated); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	e := n.engine(nil)
	e.log = slog.New(slog.NewTextHandler(&log, nil))
	e.coord.Members = 3
	top, co, err := e.topology(t.Context(), n.st, "")
	if err != nil || co == nil {
		t.Fatalf("topology with etcd answering: %+v %v", top, err)
	}
	defer co.Close()
	if top.members != 1 || top.source != "etcd's member list" {
		t.Errorf("topology: %+v; want etcd's one member", top)
	}
	for _, want := range []string{
		"--etcd-members 3 is not etcd's member list (1 members): going by etcd's",
		"stated by " + statedByFlag + " at " + stated.At.Format(time.RFC3339) + " (3) is not etcd's member list (1 members)",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log does not report %q:\n%s", want, log.String())
		}
	}
	e.keep(top, co)
	known, err := cluster.LoadMembers(path)
	if err != nil || known == nil || known.Count != 1 || known.StatedBy != "" {
		t.Errorf("kept member count after the live read: %+v %v; want 1, read from etcd", known, err)
	}
}
