package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletmodel"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// lateStart is the model kubelet, plus one process of binary that a start
// kubelet issued before it saw the rollback's removal brings up after the
// rollback saw the component gone: it appears at the first mark taken
// once armed is set and runs for half the quiet period (quietTicks), until kubelet
// kills it.
type lateStart struct {
	*kubeletmodel.Kubelet
	binary string
	armed  bool
	ghost  *proc.Process
	until  uint64
}

func (l *lateStart) Mark() (proc.Mark, error) {
	m, err := l.Kubelet.Mark()
	if err == nil && l.armed && l.ghost == nil {
		l.ghost = &proc.Process{PID: 99999, StartTicks: m.Ticks + 1}
		l.until = m.Ticks + quietTicks/2
	}
	return m, err
}

// alive reports whether the ghost runs now.
func (l *lateStart) alive() bool {
	if l.ghost == nil {
		return false
	}
	m, err := l.Kubelet.Mark()
	return err == nil && m.Ticks >= l.ghost.StartTicks && m.Ticks < l.until
}

func (l *lateStart) PIDs(b string) ([]proc.Process, error) {
	ps, err := l.Kubelet.PIDs(b)
	if err == nil && b == l.binary && l.alive() {
		ps = append(ps, *l.ghost)
	}
	return ps, err
}

func (l *lateStart) WaitGone(ctx context.Context, t proc.Target, d time.Duration) error {
	if t.Binary == l.binary && l.alive() {
		return fmt.Errorf("waiting for %s to exit: the model does not wait: pid %d runs", t.Name, l.ghost.PID)
	}
	return l.Kubelet.WaitGone(ctx, t, d)
}

// TestRollbackWaitsOutLateStarts: the rollback marks a component only once
// it has stayed stopped for the quiet period. A process of the upgrade's
// pod that comes up after the stop (kubelet issued its start before it saw
// the removal) and is killed within that period is gone when the rollback
// marks and restores, so it cannot pass for the restored pod's process.
func TestRollbackWaitsOutLateStarts(t *testing.T) {
	n := newMemNode(t)
	n.before = n.manifests()
	tgt, err := manifest.Target(n.st, nodestate.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	l := &lateStart{Kubelet: n.k, binary: tgt.Binary}
	n.procs = l
	var atRestore []proc.Process
	n.onEvent = func(ev Event) {
		switch {
		case ev.Step == "stop" && ev.Component == nodestate.Scheduler:
			l.armed = true
		case ev.Step == "restore":
			atRestore, _ = l.PIDs(tgt.Binary)
		}
	}
	res, err := n.engine(nil).Run(t.Context(), release(n.st, false, nodestate.Scheduler, "never-listen"), nil)
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("Run: %+v %v: want rolled back", res, err)
	}
	if l.ghost == nil {
		t.Fatal("the late start never came: the rollback took no mark after stopping kube-scheduler")
	}
	if len(atRestore) > 0 {
		t.Errorf("kube-scheduler processes %v run when the rollback restores its manifest: a late start of the upgrade's pod was not waited out", atRestore)
	}
	n.expectConverged(RolledBack)
}
