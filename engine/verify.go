package engine

// verifying -> committed: every component active, none replaced again.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// verify: verifying -> committed. Every roster component must be active and
// no changed component replaced again during the soak window.
func (e *Engine) verify(ctx context.Context, r *run) error {
	roster := manifest.NamesFor(r.to)
	e.event(r.txn.ID, r.txn.Phase, "verify", "", fmt.Sprintf("%s soak", e.dl.Soak), fmt.Sprintf("verifying every component for %s", e.dl.Soak))
	boot, err := e.procs.Mark()
	if err != nil {
		return err
	}
	// Every component must answer before the soak starts: after a crash or
	// a reboot, the ones this transaction did not touch may still be coming
	// up.
	for _, comp := range roster {
		t, err := manifest.Target(r.to, comp)
		if err != nil {
			return err
		}
		if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
			return fmt.Errorf("verify: %s: %w", comp, err)
		}
	}
	if err := e.rewriteChanged(ctx, r); err != nil {
		return err
	}
	want := map[string][]proc.Process{}
	for _, comp := range r.txn.Changed {
		if !slices.Contains(roster, comp) {
			continue // stopped by this transaction: nothing runs to soak
		}
		rec, ok := r.findIn(journal.StepDone, comp, journal.PhaseApplying, journal.PhaseVerifying)
		if ok && rec.BootID == boot.BootID {
			want[comp] = rec.Processes
			continue
		}
		// The step was done in another boot: every process is new, so the
		// soak starts from the processes that run now.
		if want[comp], err = e.identity(r.to, comp); err != nil {
			return err
		}
	}
	if err := e.soak(ctx, r.to, roster, want); err != nil {
		return err
	}
	e.hit(fault.BeforeCommit)
	if err := move(r.txn.Phase, journal.PhaseCommitted); err != nil {
		return err
	}
	if err := e.j.Commit(r.txn.ID, r.to, journal.Record{Phase: journal.PhaseCommitted, Step: journal.StepVerified}); err != nil {
		return fmt.Errorf("%w: %v", errFatalJournal, err)
	}
	r.txn.Phase = journal.PhaseCommitted
	// Right after the journal's commit, before anything is told of it: what
	// a commit owes (the kubeadm-config update) must survive a crash here.
	e.hit(fault.AfterCommit)
	e.event(r.txn.ID, journal.PhaseCommitted, "commit", "", "", "committed: node state is now "+r.to.KubernetesVersion)
	e.ended(r, Committed, "")
	return nil
}

// rewriteChanged steps again every changed component whose manifest no
// longer holds its target (edited between a crash and resume, or after its
// step), so that what commits is what the transaction planned.
func (e *Engine) rewriteChanged(ctx context.Context, r *run) error {
	for _, comp := range r.txn.Changed {
		mark, ok := r.findIn(journal.StepMark, comp, journal.PhaseApplying, journal.PhaseVerifying)
		if !ok || mark.ProcMark == nil {
			return fmt.Errorf("verify: %s: no mark of its step is journaled: the journal is damaged", comp)
		}
		on, err := e.targetOnDisk(r, journal.PhaseVerifying, comp, mark.Stamp)
		if err != nil {
			return fmt.Errorf("verify: %s: %w", comp, err)
		}
		if on {
			continue
		}
		e.log.Warn("a component's manifest is not what this transaction wrote; writing it again", "component", comp)
		if err := e.step(ctx, r, journal.PhaseVerifying, comp, *mark.ProcMark, mark.Stamp, false); err != nil {
			return err
		}
		var ids []proc.Process
		if r.writes(comp) {
			if ids, err = e.identity(r.to, comp); err != nil {
				return err
			}
		}
		if err := e.append(r, journal.PhaseVerifying, journal.Record{Phase: journal.PhaseVerifying, Step: journal.StepDone, Component: comp, Processes: ids}); err != nil {
			return err
		}
	}
	return nil
}

// soak checks the roster repeatedly for the soak window: every component
// active (three failed checks in a row fail it: one slow answer is not a
// crash loop) and every component in want still the processes it names.
func (e *Engine) soak(ctx context.Context, st *nodestate.NodeState, roster []string, want map[string][]proc.Process) error {
	targets := make([]proc.Target, len(roster))
	for i, comp := range roster {
		t, err := manifest.Target(st, comp)
		if err != nil {
			return err
		}
		targets[i] = t
	}
	misses := map[string]int{}
	deadline := time.Now().Add(e.dl.Soak)
	for {
		for i, comp := range roster {
			if w, ok := want[comp]; ok {
				now, err := e.identity(st, comp)
				if err != nil {
					return err
				}
				if !slices.Equal(now, w) {
					e.log.Debug("replaced during the soak", "component", comp, "was", w, "now", now)
					return fmt.Errorf("%s was replaced during the %s soak window (%s): it is crash-looping or kubelet restarted it; check its log (crictl ps -a --name %s, then crictl logs ID) and kubelet's (journalctl -u kubelet)", comp, e.dl.Soak, replacedPIDs(w, now), comp)
				}
			}
			if e.procs.Active(ctx, targets[i]) {
				misses[comp] = 0
			} else if misses[comp]++; misses[comp] >= 3 {
				if !proc.HasListener(targets[i]) {
					return fmt.Errorf("%s stopped running during the %s soak window; check kubelet's log (journalctl -u kubelet)", comp, e.dl.Soak)
				}
				return fmt.Errorf("%s stopped answering %s during the %s soak window; check its log (crictl ps -a --name %s, then crictl logs ID)", comp, targets[i].Health, e.dl.Soak, comp)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// pids is processes as an operator reads them: "pid 41 (started at tick 9)".
// replacedPIDs says how the processes of a component changed, by pid: "pid
// 12, now pid 40", "pid 12, now none", or "pid 12 restarted" (a pid reused
// by the new process; the start ticks, which tell them apart, go to the
// debug log).
func replacedPIDs(was, now []proc.Process) string {
	w, n := pids(was), pids(now)
	if w == n {
		return w + " restarted"
	}
	return w + ", now " + n
}

func pids(ps []proc.Process) string {
	if len(ps) == 0 {
		return "none"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprint(p.PID)
	}
	if len(ps) == 1 {
		return "pid " + out[0]
	}
	return "pids " + strings.Join(out, ", ")
}
