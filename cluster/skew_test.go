package cluster_test

import (
	"context"
	"slices"
	"testing"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// Below reads each member's etcd version from its own status: in a
// cluster of one 3.6 member and two 3.5 members, the 3.5 ones are below
// 3.6, none is below 3.5; a member that does not answer is unknown, never
// taken for a minor (issue 37, defect F).
func TestBelowReadsEveryMembersVersion(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.5")
	m0 := c.Members[0]
	if err := m0.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := m0.Use("3.6"); err != nil {
		t.Fatal(err)
	}
	if err := m0.Start(); err != nil {
		t.Fatal(err)
	}
	cli := c.Client(t)
	h, err := cluster.ReadMembers(context.Background(), cli, m0.Name)
	if err != nil {
		t.Fatal(err)
	}
	below, unknown := h.Below("3.6")
	if want := []string{"m1 (3.5.35)", "m2 (3.5.35)"}; !slices.Equal(below, want) || len(unknown) > 0 {
		t.Fatalf("below 3.6: %q, unknown %q; want %q", below, unknown, want)
	}
	if below, unknown := h.Below("3.5"); len(below)+len(unknown) > 0 {
		t.Fatalf("below 3.5: %q, unknown %q; want none", below, unknown)
	}
	if err := c.Members[2].Kill(); err != nil {
		t.Fatal(err)
	}
	h, err = cluster.ReadMembers(context.Background(), cli, m0.Name)
	if err != nil {
		t.Fatal(err)
	}
	if below, unknown := h.Below("3.5"); len(below) > 0 || len(unknown) != 1 || unknown[0][:3] != "m2 " {
		t.Fatalf("below 3.5 with m2 down: %q, unknown %q; want m2 unknown", below, unknown)
	}
}
