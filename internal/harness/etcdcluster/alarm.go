package etcdcluster

// A real NOSPACE alarm on one member: the member's backend quota made
// small, then filled, as a disk-hungry workload fills a real one.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// noSpaceQuota is the backend quota of the member RaiseNoSpace fills: a
// few of fillValue's revisions exceed it.
const (
	noSpaceQuota = 1 << 20
	fillKey      = "etcdcluster-nospace-fill"
)

var fillValue = strings.Repeat("x", 100<<10)

// RaiseNoSpace raises a real NOSPACE alarm on m: m is restarted with
// --quota-backend-bytes of 1 MiB (ETCD_QUOTA_BACKEND_BYTES; the other
// members keep etcd's default), then one key is overwritten with 100 KiB
// values until etcd lists the alarm on m. From then on etcd refuses every
// write. t must not be parallel (the quota goes through t.Setenv).
func (c *Cluster) RaiseNoSpace(t testing.TB, m *Member) {
	t.Helper()
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ETCD_QUOTA_BACKEND_BYTES", fmt.Sprint(noSpaceQuota))
	err := m.Start()
	os.Unsetenv("ETCD_QUOTA_BACKEND_BYTES") // the members started later keep the default
	if err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy(t)
	cli := c.Client(t)
	id := c.memberID(t, cli, m)
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, perr := cli.Put(ctx, fillKey, fillValue)
		resp, aerr := cli.AlarmList(ctx)
		cancel()
		if aerr == nil {
			for _, a := range resp.Alarms {
				if a.MemberID == id && a.Alarm == etcdserverpb.AlarmType_NOSPACE {
					t.Logf("etcdcluster: NOSPACE raised on %s after %d writes (last: %v)", m.Name, i+1, perr)
					return
				}
			}
		}
	}
	t.Fatalf("etcdcluster: 200 writes of 100 KiB raised no NOSPACE alarm on %s", m.Name)
}

// ClearNoSpace ends RaiseNoSpace's alarm as an operator would: the filled
// key deleted, the history compacted, m defragmented, the alarm disarmed.
func (c *Cluster) ClearNoSpace(t testing.TB, m *Member) {
	t.Helper()
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := c.memberID(t, cli, m)
	del, err := cli.Delete(ctx, fillKey)
	if err != nil {
		t.Fatalf("etcdcluster: delete %s: %v", fillKey, err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("etcdcluster: compact: %v", err)
	}
	if _, err := cli.Defragment(ctx, m.ClientURL); err != nil {
		t.Fatalf("etcdcluster: defragment %s: %v", m.Name, err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
		t.Fatalf("etcdcluster: disarm NOSPACE on %s: %v", m.Name, err)
	}
}

// memberID is m's member id, from the member list.
func (c *Cluster) memberID(t testing.TB, cli *clientv3.Client, m *Member) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("etcdcluster: member list: %v", err)
	}
	for _, lm := range list.Members {
		if lm.Name == m.Name {
			return lm.ID
		}
	}
	t.Fatalf("etcdcluster: %s is not in the member list", m.Name)
	return 0
}
