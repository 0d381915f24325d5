package kubeletmodel

import (
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// restamp rewrites comp's manifest with a new restarted-at: a change of
// its pod UID.
func (b *bed) restamp(comp string) {
	b.t.Helper()
	if _, err := b.store.RestartAsIs(comp, b.store.Stamp()); err != nil {
		b.t.Fatal(err)
	}
}

func TestHoldKeepsThePodUntilRelease(t *testing.T) {
	b := newBed(t)
	sched := nodestate.Scheduler
	before := b.one(sched)
	b.k.Hold(b.store.Path(sched))
	b.restamp(sched)
	if now := b.one(sched); now != before {
		t.Fatalf("held: the pod was replaced: %v -> %v", before, now)
	}
	m, _ := b.k.Mark()
	if err := b.k.WaitReplaced(t.Context(), b.target(sched), m, time.Minute); err == nil {
		t.Fatal("WaitReplaced passed on a held file")
	}
	if _, err := b.store.Remove(sched); err != nil {
		t.Fatal(err)
	}
	if err := b.k.WaitGone(t.Context(), b.target(sched), time.Minute); err == nil {
		t.Fatal("held: the removal killed the pod")
	}
	b.restamp(nodestate.ControllerManager) // other files are not held
	b.k.Release(b.store.Path(sched))
	if err := b.k.WaitGone(t.Context(), b.target(sched), time.Minute); err != nil {
		t.Fatalf("released: %v", err)
	}
}

func TestLagActsAtTheSyncAfter(t *testing.T) {
	b := newBed(t)
	sched := nodestate.Scheduler
	b.k.SetLag(1)
	m, _ := b.k.Mark()
	b.restamp(sched)
	if ok, stale, err := b.k.Replaced(b.target(sched), m); err != nil || ok || len(stale) != 1 {
		t.Fatalf("first look after the write: replaced %v stale %v err %v; want the old process still there", ok, stale, err)
	}
	if ok, _, err := b.k.Replaced(b.target(sched), m); err != nil || !ok {
		t.Fatalf("second look: replaced %v err %v", ok, err)
	}
	// A wait sees a lagging change through within its own looks.
	m, _ = b.k.Mark()
	b.restamp(sched)
	if err := b.k.WaitReplaced(t.Context(), b.target(sched), m, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func TestRestartContainerIsANewProcessOfTheSamePod(t *testing.T) {
	b := newBed(t)
	sched := nodestate.Scheduler
	before := b.one(sched)
	uid, _ := b.k.UID(b.store.Path(sched))
	m, _ := b.k.Mark()
	if n := b.k.RestartContainer(b.target(sched).Binary); n != 1 {
		t.Fatalf("restarted %d processes", n)
	}
	now := b.one(sched)
	if now.PID == before.PID || now.StartTicks <= m.Ticks {
		t.Fatalf("after a restart: %v -> %v (mark %d)", before, now, m.Ticks)
	}
	pods, _ := b.k.Pods()
	for _, p := range pods {
		if p.File == b.store.Path(sched) && p.UID != uid {
			t.Fatalf("the restart changed the pod: uid %s -> %s", uid, p.UID)
		}
	}
	// Which is why a mark alone cannot tell it from a replacement.
	if ok, _, _ := b.k.Replaced(b.target(sched), m); !ok {
		t.Fatal("Replaced: a restarted process after the mark does not count as after it")
	}
}
