package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletmodel"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// lateStart is the model kubelet, plus one process of binary that a start
// kubelet issued before it saw the rollback's removal brings up after the
// rollback saw the component gone: it appears at the first mark taken
// once armed is set and runs for half the release delay
// (DefaultDeadlines.Release), until kubelet kills it.
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
		l.until = m.Ticks + ticks(DefaultDeadlines.Release)/2
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

// Arm looks as PIDs does (the embedded model's Arm would not see the ghost).
func (l *lateStart) Arm(t proc.Target) ([]proc.Process, error) { return l.PIDs(t.Binary) }

func (l *lateStart) WaitGone(ctx context.Context, t proc.Target, d time.Duration) error {
	if t.Binary == l.binary && l.alive() {
		return fmt.Errorf("waiting for %s to exit: the model does not wait: pid %d runs", t.Name, l.ghost.PID)
	}
	return l.Kubelet.WaitGone(ctx, t, d)
}

// TestStepWaitsOutLateStarts: a component is written only once it has
// stayed stopped for the release delay, in an upgrade's step and in a
// rollback. A process of the pod being replaced that comes up after the
// stop (kubelet issued its start before it saw the removal) and is killed
// within that period is gone when the new manifest is written, so it cannot
// pass for the new pod's process.
func TestStepWaitsOutLateStarts(t *testing.T) {
	for _, tc := range []struct {
		name, phase string
		mode        standin.Mode
		want        Outcome
	}{
		{"upgrade step", "applying", standin.ModeHealthy, Committed},
		{"rollback", "rolling-back", standin.ModeNeverListen, RolledBack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newMemNode(t)
			n.before = n.manifests()
			tgt, err := manifest.Target(n.st, nodestate.Scheduler)
			if err != nil {
				t.Fatal(err)
			}
			l := &lateStart{Kubelet: n.k, binary: tgt.Binary}
			n.procs = l
			var atWrite []proc.Process
			wrote := false
			n.onEvent = func(ev Event) {
				if ev.Phase != tc.phase || wrote {
					return
				}
				switch {
				case ev.Step == "stop" && ev.Component == nodestate.Scheduler:
					l.armed = true
				case l.armed && (ev.Step == "restore" || ev.Step == "write" && ev.Component == nodestate.Scheduler):
					atWrite, _ = l.PIDs(tgt.Binary)
					wrote = true
				}
			}
			res, err := n.engine(nil).Run(t.Context(), release(n.st, false, nodestate.Scheduler, tc.mode), nil)
			if res.Outcome != tc.want {
				t.Fatalf("Run: %+v %v: want %s", res, err, tc.want)
			}
			if l.ghost == nil {
				t.Fatal("the late start never came: no mark was taken after kube-scheduler was stopped")
			}
			if !wrote {
				t.Fatal("kube-scheduler was never written after its stop")
			}
			if slices.Contains(atWrite, *l.ghost) {
				t.Errorf("kube-scheduler processes %v run when its new manifest is written: the late start of the old pod (pid %d) was not waited out", atWrite, l.ghost.PID)
			}
			n.expectConverged(tc.want)
		})
	}
}

// podCgroups is the model kubelet whose processes run in a pod cgroup: a
// real directory per component, which the test removes late, as kubelet
// removes a terminated pod's cgroup a moment after its last process went.
type podCgroups struct {
	*kubeletmodel.Kubelet
	dir string
}

func (c *podCgroups) PodCgroups(ps []proc.Process) ([]string, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	return []string{c.dir}, nil
}

func (c *podCgroups) WaitCgroupsGone(ctx context.Context, dirs []string, timeout time.Duration) error {
	return proc.Host().WaitCgroupsGone(ctx, dirs, timeout)
}

// TestStepWritesOnceThePodCgroupIsGone: where the pod cgroup can be seen,
// the step writes the new manifest only once it is gone (kubelet removes
// it just before it releases the pod's name).
func TestStepWritesOnceThePodCgroupIsGone(t *testing.T) {
	n := newMemNode(t)
	c := &podCgroups{Kubelet: n.k, dir: filepath.Join(t.TempDir(), "pod0123456789abcdef")}
	n.procs = c
	var removed atomic.Bool
	var stillThere bool
	n.onEvent = func(ev Event) {
		switch {
		case ev.Step == "stop" && ev.Component == nodestate.Scheduler:
			if err := os.Mkdir(c.dir, 0o755); err != nil {
				t.Error(err)
			}
			go func() {
				time.Sleep(300 * time.Millisecond)
				removed.Store(true)
				_ = os.Remove(c.dir)
			}()
		case ev.Step == "write" && ev.Component == nodestate.Scheduler:
			_, err := os.Stat(c.dir)
			stillThere = err == nil
		}
	}
	res, err := n.engine(nil).Run(t.Context(), release(n.st, false, nodestate.Scheduler, standin.ModeHealthy), nil)
	if err != nil || res.Outcome != Committed {
		t.Fatalf("Run: %+v %v", res, err)
	}
	if !removed.Load() || stillThere {
		t.Fatalf("kube-scheduler was written while its old pod's cgroup %s was still there", c.dir)
	}
	n.expectConverged(Committed)
}
