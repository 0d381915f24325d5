package engine

// Surge replacement (issue 41): kube-apiserver, kube-controller-manager
// and kube-scheduler are replaced without a gap. The new instance is
// written under a second static pod name (the surge copy) and kubelet runs
// it beside the old one, both listening on one port with SO_REUSEPORT
// (--permit-port-sharing); once it answers, the canonical manifest is
// written and kubelet replaces the old pod while the surge copy serves;
// once the canonical pod answers, the surge copy is removed. Each stage is
// journaled before it is acted on (journal.StepSurge). A surge that an
// interruption or a failure cut short is removed before anything else
// happens to its component, which then takes the stop-then-start path.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// Surger is what a Processes must also do for a surge: tell the instances
// of a component apart by the static pod that runs them, know which one
// answered, and read what a surge costs. *proc.Scanner implements it; a
// Processes that does not is never surged with.
type Surger interface {
	// Instances is t's processes grouped by pod UID; byPod is false when
	// kubelet makes no pod cgroups and instances cannot be told apart.
	Instances(t proc.Target) (insts []proc.Instance, byPod bool, err error)
	// WaitInstanceActive waits until t's health endpoint answers on a
	// connection a process of pod uid accepted.
	WaitInstanceActive(ctx context.Context, t proc.Target, uid string, timeout time.Duration) error
	MemAvailable() (uint64, error)
	RSS(ps []proc.Process) (uint64, error)
	// Args is the argv p runs with, read from the live process.
	Args(p proc.Process) ([]string, error)
}

// SurgeStore is what a Manifests must also do for a surge: write and
// remove a component's surge copy, as atomically and durably as its
// canonical manifest. *manifest.Store implements it.
type SurgeStore interface {
	WriteSurge(name string, b []byte) error
	// RemoveSurge removes name's surge copy; one already absent is not an
	// error.
	RemoveSurge(name string) error
}

// surgeMemoryFloor is the memory a surge leaves available on top of a
// second instance as large as the running one: the kernel, kubelet and
// the container runtime must not be pushed into reclaim or the OOM killer
// while both run.
const surgeMemoryFloor = 256 << 20

// surgeable reports whether comp can be replaced with a surge at all:
// etcd has one data directory and kube-vip holds an address.
func surgeable(comp string) bool {
	return comp == nodestate.KubeAPIServer || comp == nodestate.ControllerManager || comp == nodestate.Scheduler
}

// surgePlan is whether comp's step surges, and if not why (one line for
// the operator; empty when comp could never surge and nothing needs
// saying). old is the running instance a surge starts beside.
type surgePlan struct {
	ok  bool
	why string
	old proc.Instance
}

// planSurge decides from the live node, just before comp's step, whether
// the step surges.
func (e *Engine) planSurge(r *run, comp string) surgePlan {
	if !surgeable(comp) || !r.writes(comp) || r.from.IsStopped(comp) {
		return surgePlan{}
	}
	tg, _ := r.txn.Target(comp)
	return surgeVerdict(e.procs, e.store, e.noSurge, r.from, comp, tg.Manifest)
}

// surgeVerdict is whether comp, running from st, can be replaced by a
// surge to the manifest bytes target, on the node procs and store see.
// Anything that cannot be read decides stop-then-start: a surge only
// shortens a gap, and the path without it is the one every fault matrix
// has proven.
func surgeVerdict(procs Processes, store Manifests, noSurge bool, st *nodestate.NodeState, comp string, target []byte) surgePlan {
	no := func(format string, a ...any) surgePlan {
		return surgePlan{why: fmt.Sprintf(format, a...)}
	}
	if noSurge {
		return no("--no-surge")
	}
	sp, ok := procs.(Surger)
	if _, stores := store.(SurgeStore); !ok || !stores {
		return no("this node's process view cannot tell two instances apart")
	}
	if !newSharesPort(comp, target) {
		return no("its new manifest does not enable --permit-port-sharing")
	}
	t, err := manifest.Target(st, comp)
	if err != nil {
		return no("%v", err)
	}
	insts, byPod, err := sp.Instances(t)
	switch {
	case err != nil:
		return no("its processes could not be read: %v", err)
	case len(insts) == 0:
		return no("no instance of it runs, so there is none to start the new one beside")
	case !byPod:
		return no("kubelet makes no pod cgroups here, so the old and the new instance could not be told apart")
	case len(insts) != 1:
		return no("%d instances of it run, not one", len(insts))
	}
	old := insts[0]
	for _, p := range old.Processes {
		args, err := sp.Args(p)
		if err != nil {
			return no("the running instance's flags could not be read: %v", err)
		}
		if !manifest.HasPortSharing(args) {
			return no("the running instance was started without --permit-port-sharing (this upgrade adds it; the next one surges)")
		}
	}
	avail, err := sp.MemAvailable()
	if err != nil {
		return no("the memory available could not be read: %v", err)
	}
	rss, err := sp.RSS(old.Processes)
	if err != nil {
		return no("the running instance's memory could not be read: %v", err)
	}
	if need := rss + surgeMemoryFloor; avail < need {
		return no("%d MiB of memory available, and a second instance needs about %d MiB (the running one's %d MiB plus %d MiB kept free)", avail>>20, need>>20, rss>>20, surgeMemoryFloor>>20)
	}
	return surgePlan{ok: true, old: old}
}

// Replacement is how a plan's component will be replaced: Surge, or
// stop-then-start for the reason Why. A step decides again, from the
// live node, just before it runs.
type Replacement struct {
	Surge bool
	Why   string
}

// planReplacements sets plan.Replacements: how each changed component that
// can surge at all will be replaced, as the node is now (no --no-surge: a
// plan is not a transaction). Nothing without procs.
func planReplacements(plan *Plan, store Manifests, procs Processes) {
	if procs == nil {
		return
	}
	for _, c := range plan.Changes {
		if !surgeable(c.Component) || len(c.After) == 0 || c.Before == nil || plan.From.IsStopped(c.Component) {
			continue
		}
		v := surgeVerdict(procs, store, false, plan.From, c.Component, c.After)
		if plan.Replacements == nil {
			plan.Replacements = map[string]Replacement{}
		}
		plan.Replacements[c.Component] = Replacement{Surge: v.ok, Why: v.why}
	}
}

// openSurge is the "writing" record of comp's surge that was begun and
// not removed, in any phase: a transaction may surge a component, clear
// that surge after an interruption, and surge it again.
func (r *run) openSurge(comp string) (journal.Record, bool) {
	for i := len(r.recs) - 1; i >= 0; i-- {
		rec := r.recs[i]
		if rec.Step != journal.StepSurge || rec.Component != comp {
			continue
		}
		switch rec.Why {
		case journal.SurgeRemoved:
			return journal.Record{}, false
		case journal.SurgeWriting:
			return rec, true
		}
	}
	return journal.Record{}, false
}

// surgeUp writes comp's surge copy beside the running instance old and
// waits until it answers: the first half of a surge. It returns the surge
// pod's UID, journaled with the "active" record.
func (e *Engine) surgeUp(ctx context.Context, r *run, comp, stamp string, old proc.Instance) (string, error) {
	sp := e.procs.(Surger)
	want, err := r.want(comp, stamp)
	if err != nil {
		return "", err
	}
	copyBytes, err := manifest.SurgeBytes(comp, want)
	if err != nil {
		return "", fmt.Errorf("%s: surge copy: %w", comp, err)
	}
	m, err := e.procs.Mark()
	if err != nil {
		return "", fmt.Errorf("%s: %w", comp, err)
	}
	if err := e.append(r, journal.PhaseApplying, journal.Record{Phase: journal.PhaseApplying, Step: journal.StepSurge, Component: comp, Why: journal.SurgeWriting, ProcMark: &m, Pods: []string{old.PodUID}}); err != nil {
		return "", err
	}
	if err := e.procs.PastMark(ctx, m); err != nil {
		return "", fmt.Errorf("%s: %w", comp, err)
	}
	if err := e.store.(SurgeStore).WriteSurge(comp, copyBytes); err != nil {
		return "", fmt.Errorf("%s: write its surge copy: %w", comp, err)
	}
	e.event(r.txn.ID, journal.PhaseApplying, "surge-write", comp, "", "wrote "+manifest.SurgeFileName(comp)+": the new "+comp+" starts beside the old one")
	e.hit(fault.AfterSurgeWrite.Of(comp))
	t, err := manifest.Target(r.to, comp)
	if err != nil {
		return "", err
	}
	// Started: a process outside the old pod runs, none of them from
	// before the mark.
	beside := t
	beside.NotPods = []string{old.PodUID}
	e.event(r.txn.ID, journal.PhaseApplying, "wait-surge", comp, "kubelet to start the surge copy of "+comp, "waiting for kubelet to start the surge copy of "+comp)
	if err := e.procs.WaitReplaced(ctx, beside, m, e.dl.Replace); err != nil {
		return "", e.waitFailed(comp, err)
	}
	uid, err := e.newInstance(sp, beside)
	if err != nil {
		return "", fmt.Errorf("%s: surge copy: %w", comp, err)
	}
	e.event(r.txn.ID, journal.PhaseApplying, "wait-surge-active", comp, describeActive(t)+" from the surge copy", "waiting for the surge copy of "+describeActive(t))
	if err := sp.WaitInstanceActive(ctx, t, uid, e.dl.Active); err != nil {
		return "", e.waitFailed(comp, err)
	}
	if err := e.append(r, journal.PhaseApplying, journal.Record{Phase: journal.PhaseApplying, Step: journal.StepSurge, Component: comp, Why: journal.SurgeActive, Pods: []string{uid}}); err != nil {
		return "", err
	}
	e.hit(fault.AfterSurgeActive.Of(comp))
	return uid, nil
}

// newInstance is the pod UID of the one instance t (whose NotPods leave
// out the instances already known) has: the one kubelet just started.
func (e *Engine) newInstance(sp Surger, t proc.Target) (string, error) {
	insts, _, err := sp.Instances(t)
	if err != nil {
		return "", err
	}
	if len(insts) != 1 || insts[0].PodUID == "" {
		return "", fmt.Errorf("want one new instance of %s in its own pod, found %d", t.Name, len(insts))
	}
	return insts[0].PodUID, nil
}

// surgeDown removes comp's surge copy (pod surgeUID) once the canonical
// pod answers, and waits until the surge pod's processes are gone: the
// second half.
func (e *Engine) surgeDown(ctx context.Context, r *run, comp, surgeUID string) error {
	t, err := manifest.Target(r.to, comp)
	if err != nil {
		return err
	}
	// What runs besides the surge pod is the canonical pod, which stays.
	t.NotPods = []string{surgeUID}
	insts, _, err := e.procs.(Surger).Instances(t)
	if err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	t.NotPods = nil
	for _, in := range insts {
		t.NotPods = append(t.NotPods, in.PodUID)
	}
	if err := e.store.(SurgeStore).RemoveSurge(comp); err != nil {
		return fmt.Errorf("%s: remove its surge copy: %w", comp, err)
	}
	e.event(r.txn.ID, journal.PhaseApplying, "surge-remove", comp, "", "removed "+manifest.SurgeFileName(comp)+": the surge copy of "+comp+" stops")
	if err := e.procs.WaitGone(ctx, t, e.dl.Stop); err != nil {
		return e.waitFailed(comp, err)
	}
	if err := e.append(r, journal.PhaseApplying, journal.Record{Phase: journal.PhaseApplying, Step: journal.StepSurge, Component: comp, Why: journal.SurgeRemoved}); err != nil {
		return err
	}
	delete(r.surged, comp)
	e.hit(fault.AfterSurgeRemoved.Of(comp))
	return nil
}

// clearSurge removes a surge of comp that was begun and not finished (an
// interruption, a failure), journaling its removal in phase p; nothing
// when there is none. When the canonical manifest was not yet written, it
// also waits for the surge pod's processes to go (nothing else will: the
// component's step, if any, is still to come, and a rollback does not
// restart what it never wrote); otherwise the component's step, resumed
// or rolled back, waits them out as processes from before its mark.
func (e *Engine) clearSurge(ctx context.Context, r *run, p journal.Phase, comp string) error {
	begun, ok := r.openSurge(comp)
	if !ok {
		return nil
	}
	ss, ok := e.store.(SurgeStore)
	if !ok {
		return fmt.Errorf("%s: the journal holds a surge begun, and this manifest store cannot remove its copy", comp)
	}
	// A failed step's copy is routine (Info); an interruption's is
	// said by resume already.
	e.log.Info("removing the surge copy of a step that did not finish", "component", comp, "file", manifest.SurgeFileName(comp))
	if err := ss.RemoveSurge(comp); err != nil {
		return fmt.Errorf("%s: remove its surge copy: %w", comp, err)
	}
	if _, marked := r.find(journal.PhaseApplying, journal.StepMark, comp); !marked {
		t, err := manifest.Target(r.from, comp)
		if err != nil {
			return err
		}
		// What is not the old instance is the surge copy.
		t.NotPods = slices.Clone(begun.Pods)
		if err := e.procs.WaitGone(ctx, t, e.dl.Stop); err != nil {
			return e.waitFailed(comp, err)
		}
	}
	if err := e.append(r, p, journal.Record{Phase: p, Step: journal.StepSurge, Component: comp, Why: journal.SurgeRemoved}); err != nil {
		return err
	}
	if p == journal.PhaseRollingBack {
		e.hit(fault.AfterSurgeRemoved.InRollback(comp))
	} else {
		e.hit(fault.AfterSurgeRemoved.Of(comp))
	}
	return nil
}

// surgeFirst runs the first half of a surge for comp when planSurge says
// it surges (flushing pending, the previous component's done record, in
// front of its first record), and says in one line why not otherwise.
func (e *Engine) surgeFirst(ctx context.Context, r *run, comp string, pending *[]journal.Record) error {
	sp := e.planSurge(r, comp)
	if !sp.ok {
		if sp.why != "" {
			e.event(r.txn.ID, journal.PhaseApplying, "no-surge", comp, "", comp+" is replaced stop-then-start: "+sp.why)
		}
		return nil
	}
	if len(*pending) > 0 {
		if err := e.append(r, journal.PhaseApplying, *pending...); err != nil {
			return err
		}
		*pending = nil
	}
	stamp := ""
	if r.txn.Kind == journal.KindRollbackLast {
		stamp = e.store.Stamp()
	}
	uid, err := e.surgeUp(ctx, r, comp, stamp, sp.old)
	if err != nil {
		return err
	}
	if r.surged == nil {
		r.surged = map[string]string{}
	}
	r.surged[comp] = uid
	return nil
}

// waitCanonicalActive waits until the canonical pod of t (whose NotPods
// leave out the surge pod) answers on a connection its own process
// accepted.
func (e *Engine) waitCanonicalActive(ctx context.Context, t proc.Target) error {
	sp := e.procs.(Surger)
	uid, err := e.newInstance(sp, t)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Name, err)
	}
	if err := sp.WaitInstanceActive(ctx, t, uid, e.dl.Active); err != nil {
		return e.waitFailed(t.Name, err)
	}
	return nil
}

// newSharesPort reports whether manifest b runs comp with port sharing on:
// the canonical pod listens beside the surge copy too.
func newSharesPort(comp string, b []byte) bool {
	pod, err := manifest.DecodePod(b)
	if err != nil {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == comp {
			return manifest.HasPortSharing(append(slices.Clone(c.Command), c.Args...))
		}
	}
	return false
}
