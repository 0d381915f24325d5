package proc

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestArmedWait pins what Arm hands WaitReplaced: the processes Arm's
// scan found (one that predates the mark is still stale) and every exec
// since the subscription, including one that happened before the wait
// began. The timeouts are shorter than the two seconds after which a
// wait without events would scan the whole table, so only the armed
// subscription can account for what the waits see.
func TestArmedWait(t *testing.T) {
	if w := self().watchExecs(); w == nil {
		t.Skip("needs the kernel's process events connector (root in the initial namespaces): make test as root")
	} else {
		w.close()
	}
	s := self()
	name := uniqueName(t, "armed")
	tg := Target{Name: "kube-scheduler", Binary: name}

	old := startHelper(t, name, "sleep")
	m, err := s.Mark()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := s.Arm(tg)
	if err != nil {
		t.Fatal(err)
	}
	if got := pidsOf(ps); len(got) != 1 || got[0] != old.Process.Pid {
		t.Fatalf("Arm found %v, want the old process %d", got, old.Process.Pid)
	}
	err = s.WaitReplaced(context.Background(), tg, m, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still running: pid "+itoa(old.Process.Pid)+", started before the write") {
		t.Fatalf("armed wait with the old process running: %v, want it named stale", err)
	}
	_ = old.Process.Kill()
	_ = old.Wait()

	// The new process execs after Arm and before the wait starts.
	waitTickAfter(t, m)
	if ps, err := s.Arm(tg); err != nil || len(ps) != 0 {
		t.Fatalf("Arm after the old process exited: %v %v, want none", pidsOf(ps), err)
	}
	startHelper(t, name, "sleep")
	time.Sleep(50 * time.Millisecond)
	scans := tableScans.Load()
	if err := s.WaitReplaced(context.Background(), tg, m, 500*time.Millisecond); err != nil {
		t.Fatalf("armed wait for a process exec'd after Arm: %v", err)
	}
	if n := tableScans.Load() - scans; n != 0 {
		t.Errorf("the armed wait scanned the whole table %d times, want none (it starts from Arm's scan)", n)
	}
	// Unarmed, the same wait scans (the comparison the count above needs).
	scans = tableScans.Load()
	if err := s.WaitReplaced(context.Background(), tg, m, 500*time.Millisecond); err != nil {
		t.Fatalf("unarmed wait: %v", err)
	}
	if tableScans.Load() == scans {
		t.Error("an unarmed wait did not scan the table: the count shows nothing")
	}
	if a := s.takeArmed(name); a != nil {
		t.Fatal("the wait left its armed subscription behind")
	}

	// A copy of the Scanner does not share the subscription.
	if _, err := s.Arm(tg); err != nil {
		t.Fatal(err)
	}
	if a := s.Within(1).takeArmed(name); a != nil {
		t.Fatal("a scoped copy took the subscription Arm kept on its original")
	}
	s.takeArmed(name).w.close()
}
