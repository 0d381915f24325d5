package kubeletmodel

// A surge replacement (issue 41) runs two pods of one component side by
// side, each under its own name: the model admits a new pod with
// kubeletsim's NodePorts rule, tells the instances of a component apart by
// pod UID, and answers the surge's pre-flight questions (memory, argv).

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/proc"
)

// Default memory figures: enough for any surge until a test says otherwise.
const (
	DefaultMemAvailable = 16 << 30
	DefaultRSS          = 256 << 20
)

// admitted is the pods admission weighs a new pod against: every pod the
// model holds but p and the rejected ones. A sync kills the pods whose
// files went away before it starts new ones, as kubelet's config sends
// removes before adds, so a replaced pod is not among them.
func (k *Kubelet) admitted(p *pod) []*kubeletsim.SourcePod {
	var out []*kubeletsim.SourcePod
	for _, key := range sortedKeys(k.pods) {
		if o := k.pods[key]; o != p && o.rejected == nil && o.sp != nil {
			out = append(out, o.sp)
		}
	}
	return out
}

// reject is kubelet's rejectPod: p is held, failed, and runs nothing while
// its UID stays; a later sync does not admit it again.
func (k *Kubelet) reject(p *pod, err error) {
	var rej *kubeletsim.RejectedError
	if !errors.As(err, &rej) {
		rej = &kubeletsim.RejectedError{Reason: "UnexpectedAdmissionError", Message: err.Error()}
	}
	p.rejected = rej
	k.logf("reject %s %s: %s", p.key, short(p.uid), rej.Error())
}

// argv is what the container runs: command + args, $(VAR) expanded from
// its env values as kubelet does (kubeletsim.Expand). Without a command
// (the image's entrypoint, which the model does not know) argv[0] is the
// container's name, as the model's process name is.
func argv(c corev1.Container) []string {
	env := map[string]string{}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = kubeletsim.Expand(e.Value, lookup)
		}
	}
	cmd := c.Command
	if len(cmd) == 0 {
		cmd = []string{c.Name}
	}
	out := make([]string, 0, len(cmd)+len(c.Args))
	for _, a := range append(append([]string(nil), cmd...), c.Args...) {
		out = append(out, kubeletsim.Expand(a, lookup))
	}
	return out
}

// pidsOf syncs and lists t's processes (t.NotPods left out), by pid.
func (k *Kubelet) pidsOf(t proc.Target) ([]proc.Process, error) {
	if t.Binary == "" {
		return nil, errors.New("list processes: empty binary name")
	}
	if err := k.Sync(); err != nil {
		return nil, fmt.Errorf("list %s processes: %w", t.Name, err)
	}
	var out []proc.Process
	for _, p := range k.procs(t.Binary, t.NotPods...) {
		out = append(out, p.Process)
	}
	return out, nil
}

// Instances syncs and returns t's processes (t.NotPods left out) grouped
// by the pod that runs them, the earliest started first; each instance's
// processes by pid. The model always knows the pods: byPod is true.
func (k *Kubelet) Instances(t proc.Target) (insts []proc.Instance, byPod bool, err error) {
	if t.Binary == "" {
		return nil, true, errors.New("list instances: empty binary name")
	}
	if err := k.Sync(); err != nil {
		return nil, true, fmt.Errorf("list %s instances: %w", t.Name, err)
	}
	at := map[string]int{}
	for _, p := range k.procs(t.Binary, t.NotPods...) {
		i, ok := at[p.PodUID]
		if !ok {
			i = len(insts)
			at[p.PodUID] = i
			insts = append(insts, proc.Instance{PodUID: p.PodUID})
		}
		insts[i].Processes = append(insts[i].Processes, p.Process)
	}
	first := func(in proc.Instance) proc.Process {
		f := in.Processes[0]
		for _, p := range in.Processes[1:] {
			if p.StartTicks < f.StartTicks {
				f = p
			}
		}
		return f
	}
	sort.Slice(insts, func(i, j int) bool {
		a, b := first(insts[i]), first(insts[j])
		if a.StartTicks != b.StartTicks {
			return a.StartTicks < b.StartTicks
		}
		return a.PID < b.PID
	})
	return insts, true, nil
}

// instanceAnswer is whether pod uid's container of t.Binary answers now
// (after a sync), in WaitActive's sense: it runs in an answering mode, or,
// without a health endpoint, it runs.
func (k *Kubelet) instanceAnswer(t proc.Target, uid string) error {
	if err := k.Sync(); err != nil {
		return err
	}
	var p *pod
	for _, o := range k.pods {
		if o.uid == uid {
			p = o
		}
	}
	switch {
	case p == nil:
		return fmt.Errorf("no pod %s runs", short(uid))
	case p.rejected != nil:
		return fmt.Errorf("pod %s (%s) was rejected: %w", short(uid), p.key, p.rejected)
	}
	var ps []Proc
	for _, pr := range k.procs(t.Binary) {
		if pr.PodUID == uid {
			ps = append(ps, pr)
		}
	}
	if len(ps) == 0 {
		return fmt.Errorf("no process of %s runs in pod %s (%s)", t.Binary, short(uid), p.key)
	}
	if !proc.HasListener(t) {
		return nil
	}
	if ps[0].BindFailed {
		return fmt.Errorf("%s of pod %s exits at start: listen: bind: address already in use (the port is held without SO_REUSEPORT on both sockets)", describe(ps), short(uid))
	}
	if answers(ps[0].Mode) {
		return nil
	}
	return fmt.Errorf("GET %s: %s of pod %s (mode %s) does not answer 2xx", t.Health, describe(ps), short(uid), ps[0].Mode)
}

// WaitInstanceActive is WaitActive for the instance pod uid runs: its
// container of t.Binary answers. Checked as every wait of the model is.
func (k *Kubelet) WaitInstanceActive(ctx context.Context, t proc.Target, uid string, timeout time.Duration) error {
	what := fmt.Sprintf("%s of pod %s to answer on %s", t.Name, short(uid), t.Health)
	if !proc.HasListener(t) {
		what = fmt.Sprintf("%s of pod %s to run (it has no health endpoint)", t.Name, short(uid))
	}
	return done(ctx, what, timeout, k.await(func() error { return k.instanceAnswer(t, uid) }))
}

// SetMemory sets what MemAvailable reports and each process's RSS.
func (k *Kubelet) SetMemory(avail, rssPerProcess uint64) {
	k.memSet, k.memAvail, k.rss = true, avail, rssPerProcess
}

func (k *Kubelet) memory() (avail, rss uint64) {
	if !k.memSet {
		return DefaultMemAvailable, DefaultRSS
	}
	return k.memAvail, k.rss
}

// MemAvailable is the node's available memory in bytes (SetMemory).
func (k *Kubelet) MemAvailable() (uint64, error) {
	avail, _ := k.memory()
	return avail, nil
}

// RSS is the resident memory of ps together, in bytes: each running one
// counts SetMemory's per-process figure. A process the model does not run
// is an error, as an exited process's /proc is.
func (k *Kubelet) RSS(ps []proc.Process) (uint64, error) {
	if err := k.Sync(); err != nil {
		return 0, err
	}
	_, per := k.memory()
	var sum uint64
	for _, p := range ps {
		if _, ok := k.find(p); !ok {
			return 0, fmt.Errorf("RSS of pid %d: %w", p.PID, errNotRunning)
		}
		sum += per
	}
	return sum, nil
}

// Args is the argv of process p: its container's command and args.
func (k *Kubelet) Args(p proc.Process) ([]string, error) {
	if err := k.Sync(); err != nil {
		return nil, err
	}
	c, ok := k.find(p)
	if !ok {
		return nil, fmt.Errorf("argv of pid %d: %w", p.PID, errNotRunning)
	}
	return append([]string(nil), c.argv...), nil
}

var errNotRunning = errors.New("no such process running")

// find is the container running p (the same pid and start).
func (k *Kubelet) find(p proc.Process) (*container, bool) {
	for _, o := range k.pods {
		for _, c := range o.containers {
			if c.proc != nil && *c.proc == p {
				return c, true
			}
		}
	}
	return nil, false
}
