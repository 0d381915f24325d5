package kubeletmodel

// What the engine's proc.Scanner asks of the model: the pods and processes
// it runs, the clock (Mark, PastMark) and the waits, each checked once after
// a sync (the model is synchronous: a wait that does not hold is the
// deadline passed).

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/proc"
)

// Pod is one pod as the model holds it.
type Pod struct {
	Key  string
	File string
	UID  string
	// Rejected is the reason admission refused the pod
	// (kubeletsim.ReasonNodePorts), empty for a pod that runs.
	Rejected string
	// Processes are its containers' processes (running ones only).
	Processes []Proc
}

// Proc is one process of a pod.
type Proc struct {
	proc.Process
	Binary string
	Mode   standin.Mode
	PodUID string
	// BindFailed: it could not bind its port and exits at start.
	BindFailed bool
}

// Pods syncs and returns every pod, sorted by key.
func (k *Kubelet) Pods() ([]Pod, error) {
	if err := k.Sync(); err != nil {
		return nil, err
	}
	return k.pods2(), nil
}

func (k *Kubelet) pods2() []Pod {
	var out []Pod
	for _, key := range sortedKeys(k.pods) {
		p := k.pods[key]
		op := Pod{Key: p.key, File: p.file, UID: p.uid}
		if p.rejected != nil {
			op.Rejected = p.rejected.Reason
		}
		for _, c := range p.containers {
			if c.proc != nil {
				op.Processes = append(op.Processes, Proc{Process: *c.proc, Binary: c.binary, Mode: c.mode, PodUID: p.uid, BindFailed: c.bindFailed})
			}
		}
		out = append(out, op)
	}
	return out
}

// UID is the UID the model gives the pod in file (a path in the manifest
// directory) as it is now, or an error when it holds no pod.
func (k *Kubelet) UID(file string) (string, error) {
	sp, err := k.read(file)
	if err != nil {
		return "", err
	}
	return sp.UID, nil
}

// procs is every running process of binary's base name, sorted by pid,
// but those of the pods notPods names (proc.Target.NotPods).
func (k *Kubelet) procs(binary string, notPods ...string) []Proc {
	want := path.Base(binary)
	var out []Proc
	for _, p := range k.pods2() {
		if slices.Contains(notPods, p.UID) {
			continue
		}
		for _, pr := range p.Processes {
			if pr.Binary == want {
				out = append(out, pr)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// Mark syncs and returns the clock and the boot id.
func (k *Kubelet) Mark() (proc.Mark, error) {
	if err := k.Sync(); err != nil {
		return proc.Mark{}, fmt.Errorf("take a mark: %w", err)
	}
	return proc.Mark{Ticks: k.clock, BootID: k.bootID}, nil
}

// PastMark syncs and moves the clock past m when m is of this boot.
func (k *Kubelet) PastMark(ctx context.Context, m proc.Mark) error {
	if err := k.Sync(); err != nil {
		return err
	}
	if m.BootID == k.bootID && k.clock <= m.Ticks {
		k.clock = m.Ticks + 1
	}
	return nil
}

// PIDs syncs and lists the processes of binary (argv[0] base name), sorted
// by pid.
func (k *Kubelet) PIDs(binary string) ([]proc.Process, error) {
	if binary == "" {
		return nil, errors.New("list processes: empty binary name")
	}
	if err := k.Sync(); err != nil {
		return nil, fmt.Errorf("list %s processes: %w", path.Base(binary), err)
	}
	var out []proc.Process
	for _, p := range k.procs(binary) {
		out = append(out, p.Process)
	}
	return out, nil
}

// answer is whether t is active now (after a sync), and why not.
func (k *Kubelet) answer(t proc.Target) error {
	if err := k.Sync(); err != nil {
		return err
	}
	if !proc.HasListener(t) {
		if len(k.procs(t.Binary, t.NotPods...)) == 0 {
			return fmt.Errorf("no process of %s is running", t.Binary)
		}
		return nil
	}
	// The health endpoint is a port: whichever instance listens on it
	// answers, so NotPods leaves none out (proc's probe does not either).
	ps := k.procs(t.Binary)
	if len(ps) == 0 {
		return fmt.Errorf("no process of %s is running", t.Binary)
	}
	for _, p := range ps {
		if answers(p.Mode) && !p.BindFailed {
			return nil
		}
	}
	return fmt.Errorf("GET %s: %s (mode %s) does not answer 2xx", t.Health, describe(ps), ps[0].Mode)
}

// answers is whether a process in mode answers its health endpoint.
func answers(m standin.Mode) bool {
	switch m {
	case standin.ModeHealthy, standin.ModeCrashAfter, standin.ModeIgnoreSIGTERM:
		return true
	}
	return false
}

// Active syncs and reports whether t answers: a process of t.Binary runs
// in an answering mode, or, without a health endpoint, any process runs.
func (k *Kubelet) Active(_ context.Context, t proc.Target) bool { return k.answer(t) == nil }

// WaitActive is Active, checked once: when it does not hold, the deadline
// is taken as passed.
func (k *Kubelet) WaitActive(ctx context.Context, t proc.Target, timeout time.Duration) error {
	what := fmt.Sprintf("%s to answer on %s", t.Name, t.Health)
	if !proc.HasListener(t) {
		what = fmt.Sprintf("%s to run (it has no health endpoint)", t.Name)
	}
	return done(ctx, what, timeout, k.await(func() error { return k.answer(t) }))
}

// WaitReplaced checks once, after the sync, that at least one process of
// t.Binary runs and none started at or before m (every process counts as
// after a mark of another boot).
func (k *Kubelet) WaitReplaced(ctx context.Context, t proc.Target, m proc.Mark, timeout time.Duration) error {
	what := fmt.Sprintf("%s to be replaced after tick %d of boot %s", t.Name, m.Ticks, m.BootID)
	if m.BootID == "" {
		return fmt.Errorf("waiting for %s: mark has no boot id (take it with Mark)", what)
	}
	return done(ctx, what, timeout, k.await(func() error {
		ok, stale, err := k.Replaced(t, m)
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case len(stale) > 0:
			return fmt.Errorf("still running from before the mark: %s", describeProcs(stale))
		default:
			return fmt.Errorf("no process of %s is running", t.Binary)
		}
	}))
}

// Replaced syncs and reports, as proc.Scanner's Replaced, whether at least
// one process of t.Binary runs and none started at or before m (every
// process counts as after a mark of another boot), with the ones that did.
func (k *Kubelet) Replaced(t proc.Target, m proc.Mark) (bool, []proc.Process, error) {
	if m.BootID == "" {
		return false, nil, errors.New("mark has no boot id")
	}
	if err := k.Sync(); err != nil {
		return false, nil, err
	}
	ps := k.procs(t.Binary, t.NotPods...)
	var stale []proc.Process
	if m.BootID == k.bootID {
		for _, p := range ps {
			if p.StartTicks <= m.Ticks {
				stale = append(stale, p.Process)
			}
		}
	}
	return len(ps) > 0 && len(stale) == 0, stale, nil
}

// Of is PIDs(t.Binary) without the processes of t.NotPods: the model runs
// only the node's static pods, so every other process of a binary is the
// component's.
func (k *Kubelet) Of(t proc.Target) ([]proc.Process, error) { return k.pidsOf(t) }

// Arm is Of: the model's WaitReplaced has nothing to ready.
func (k *Kubelet) Arm(t proc.Target) ([]proc.Process, error) { return k.pidsOf(t) }

// WaitGone checks, after the sync, that no process of t.Binary runs.
func (k *Kubelet) WaitGone(ctx context.Context, t proc.Target, timeout time.Duration) error {
	return done(ctx, t.Name+" to exit", timeout, k.await(func() error {
		if err := k.Sync(); err != nil {
			return err
		}
		if ps := k.procs(t.Binary, t.NotPods...); len(ps) > 0 {
			return fmt.Errorf("still running: %s", describe(ps))
		}
		return nil
	}))
}

// done ends a wait that checked once: nil when why is nil, else the error
// of a wait whose deadline passed.
func done(ctx context.Context, what string, timeout time.Duration, why error) error {
	if why == nil {
		return nil
	}
	cause := context.DeadlineExceeded
	if err := ctx.Err(); err != nil {
		cause = err
	}
	return fmt.Errorf("waiting for %s: the model does not wait, so the %s deadline is taken as passed (%w); last failure: %w", what, timeout, cause, why)
}

func describe(ps []Proc) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("pid %d (started tick %d)", p.PID, p.StartTicks)
	}
	return strings.Join(parts, ", ")
}

// PodCgroups is none: the model's processes run in no cgroup, so the
// engine waits its fixed release delay, which the model's clock passes at
// once (PastMark).
func (k *Kubelet) PodCgroups(ps []proc.Process) ([]string, error) { return nil, nil }

// WaitCgroupsGone has nothing to wait for (PodCgroups is always empty).
func (k *Kubelet) WaitCgroupsGone(ctx context.Context, dirs []string, timeout time.Duration) error {
	return nil
}
