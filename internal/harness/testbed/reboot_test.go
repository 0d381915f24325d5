package testbed

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/proc"
)

// A reboot kills every process of the node and starts the kubelet stand-in
// again, which runs every pod from the manifests on disk: every process is
// new (started after the reboot began), every component is active again,
// etcd kept its data, and the boot id is new each time.
func TestReboot(t *testing.T) {
	n := Start(t, Options{})
	roster := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := etcdclient.New(t, n).Put(ctx, "/stratum/before-reboot", "kept"); err != nil {
		t.Fatal(err)
	}
	kernel, err := journal.ReadBootID()
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{kernel}
	for round := 1; round <= 2; round++ {
		before, err := n.Leftovers()
		if err != nil {
			t.Fatal(err)
		}
		if len(before) != 1+len(roster) {
			t.Fatalf("round %d: %d marked processes before the reboot (%v), want the stand-in and %d pods", round, len(before), before, len(roster))
		}
		oldKubelet := n.KubeletPID
		mark, err := proc.Host().Mark()
		if err != nil {
			t.Fatal(err)
		}
		id, err := n.Reboot(0)
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 36 || slices.Contains(ids, id) {
			t.Fatalf("round %d: boot id %q: want a new one in the kernel's format (earlier ones and the kernel's: %v)", round, id, ids)
		}
		ids = append(ids, id)
		if n.KubeletPID == oldKubelet {
			t.Errorf("round %d: KubeletPID %d did not change", round, n.KubeletPID)
		}
		if m, err := n.Scanner.Mark(); err != nil || m.BootID != id {
			t.Errorf("round %d: the node's scanner reports boot %q (%v), want %s", round, m.BootID, err, id)
		}
		if err := n.WaitActive(ctx, 90*time.Second); err != nil {
			t.Fatalf("round %d: after the reboot: %v", round, err)
		}
		checkNode(t, n, roster)
		after, err := n.Leftovers()
		if err != nil {
			t.Fatal(err)
		}
		if len(after) != 1+len(roster) {
			t.Errorf("round %d: %d marked processes after the reboot (%v), want the stand-in and %d pods", round, len(after), after, len(roster))
		}
		for _, pid := range after {
			// (pid, start ticks) is a process's identity: a pid the kernel
			// handed out again still has new start ticks.
			ticks, alive, err := proc.Host().StartTicks(pid)
			if err == nil && alive && ticks <= mark.Ticks {
				t.Errorf("round %d: pid %d started at tick %d, before the reboot began (tick %d): it survived", round, pid, ticks, mark.Ticks)
			}
		}
	}
	c := etcdclient.New(t, n)
	var got string
	for ctx.Err() == nil { // the client may need to reconnect
		resp, err := c.Get(ctx, "/stratum/before-reboot")
		if err == nil && len(resp.Kvs) == 1 {
			got = string(resp.Kvs[0].Value)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "kept" {
		t.Fatalf("etcd key after two reboots: %q (%v), want \"kept\"", got, ctx.Err())
	}
}
