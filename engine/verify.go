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
	want := map[string][]proc.Process{}
	for _, comp := range r.txn.Changed {
		rec, ok := r.find(journal.PhaseApplying, journal.StepDone, comp)
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
	e.event(r.txn.ID, journal.PhaseCommitted, "commit", "", "", "committed: node state is now "+r.to.KubernetesVersion)
	e.hit(fault.AfterCommit)
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
					return fmt.Errorf("%s was replaced during the %s soak window (processes %s, now %s): it is crash-looping or kubelet restarted it", comp, e.dl.Soak, pids(w), pids(now))
				}
			}
			if e.procs.Active(ctx, targets[i]) {
				misses[comp] = 0
			} else if misses[comp]++; misses[comp] >= 3 {
				return fmt.Errorf("%s stopped answering %s during the soak window", comp, describeHealth(targets[i]))
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
func pids(ps []proc.Process) string {
	if len(ps) == 0 {
		return "none"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("pid %d (started at tick %d)", p.PID, p.StartTicks)
	}
	return strings.Join(out, ", ")
}
