package cli

// init and render on a live node: when a manifest that changes belongs to
// a component whose processes run, the change is one transaction (the
// journal's node state applied: snapshot, one component at a time with the
// waits, rollback on failure), not every manifest written at once. A fresh
// node (nothing of the node runs) keeps the plain render.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// renderPlan is what bringing the manifest directory to st's render
// changes: the plan (nil when nothing of the roster changes), the changing
// components whose processes run, and the manifests of components outside
// the roster that a render removes.
type renderPlan struct {
	plan    *engine.Plan
	live    []string
	removes []string
	// quiet are the changing components whose manifest on disk kubelet
	// sees as the same pod as the render (kubeletpod.Same: only bytes,
	// defaults or key order differ, as after adopting a kubeadm node):
	// writing them restarts nothing, so they are written at once, never
	// through a transaction that would wait for a replacement.
	quiet []string
	// noTxn says why no transaction can make the change: a manifest on
	// disk is no pod a rollback could put back (engine.ErrUnrestorable),
	// which the plain render replaces.
	noTxn error
}

// planRender computes renderPlan for st against store; it writes nothing.
// The pre-flight checks are left to the transaction. A stray that shadows
// a component refuses a render that changes anything (manifest.ShadowError,
// which names the stray and the command that moves it): kubelet runs the
// stray, not what is written, and writing at once on a live node would
// restart every changed component together.
// A staging leftover shadows nothing here: the render sweeps it first.
func (g *globals) planRender(store *manifest.Store, st *nodestate.NodeState) (*renderPlan, error) {
	rp, err := g.planRenderOf(swept{store}, st)
	if !errors.Is(err, manifest.ErrShadowed) {
		return rp, err
	}
	if again, aerr := g.planRenderOf(unshadowed{store}, st); aerr == nil && again.plan == nil && len(again.removes) == 0 && again.noTxn == nil {
		return again, nil // nothing would change: there is nothing to refuse
	}
	return nil, err
}

// swept is the manifest directory as a render sees it, after its sweep.
type swept struct{ *manifest.Store }

func (s swept) CheckShadows(roster []string) error { return s.Store.CheckShadowsAfterSweep(roster) }

// unshadowed is a manifest directory whose strays shadow nothing: what a
// render would change, were the stray gone.
type unshadowed struct{ *manifest.Store }

func (unshadowed) CheckShadows([]string) error { return nil }

func (g *globals) planRenderOf(store engine.Manifests, st *nodestate.NodeState) (*renderPlan, error) {
	rp := &renderPlan{}
	for _, name := range manifest.Names {
		if slices.Contains(manifest.NamesFor(st), name) {
			continue
		}
		if _, err := store.Read(name); err == nil {
			rp.removes = append(rp.removes, name)
		}
	}
	plan, err := engine.PlanState(context.Background(), store, g.scanner, st, st, engine.UpgradeOptions{IgnorePreflight: []string{engine.IgnoreAll}})
	switch {
	case errors.Is(err, engine.ErrNothingToDo):
		return rp, nil
	case errors.Is(err, engine.ErrUnrestorable):
		rp.noTxn = err
		return rp, nil
	case err != nil:
		return nil, err
	}
	rp.plan = plan
	for _, c := range plan.Changes {
		if sameToKubelet(c.Before, c.After) {
			rp.quiet = append(rp.quiet, c.Component)
			continue
		}
		t, err := manifest.Target(st, c.Component)
		if err != nil {
			return nil, err
		}
		if ps, err := g.scanner.Of(t); err != nil || len(ps) > 0 {
			// Unknown counts as running: the transaction's waits are safe.
			rp.live = append(rp.live, c.Component)
		}
	}
	return rp, nil
}

// renderLive brings the manifest directory to the render of st, the node
// state journal j holds, for command (init or render): as one transaction
// when rp says a running component's manifest changes (then WriteAll only
// removes what left the roster), with opts's pre-flight checks, else every
// manifest at once; msg heads the plain render's report. carried says that
// j holds another node state, which the transaction replaces with st only
// when it commits (init --force on a live node); then a transaction that
// ends without committing, nothing left open, puts back the quiet
// components' manifests as they were, so that the manifests stay the render
// of the state the journal keeps.
func (g *globals) renderLive(command string, j *journal.Journal, store *manifest.Store, st *nodestate.NodeState, rp *renderPlan, opts engine.UpgradeOptions, carried bool, msg string) error {
	if rp == nil || len(rp.live) == 0 {
		res, err := store.WriteAll(st)
		if err != nil {
			return err
		}
		if rp != nil && rp.noTxn != nil && len(res.Written)+len(res.Removed) > 0 {
			// Said only when something was written: with nothing to write,
			// "written at once" was a warning about nothing.
			g.log.Warn("no transaction could make this render: the changed manifests were written at once", "written", res.Written, "removed", res.Removed, "err", rp.noTxn)
		}
		return g.printWrite(msg, store, res)
	}
	for _, c := range rp.plan.Changes {
		if !slices.Contains(rp.quiet, c.Component) {
			continue
		}
		// The same pod to kubelet: written now, outside the transaction,
		// which would otherwise wait for a replacement that never comes.
		if _, err := store.Put(c.Component, c.After); err != nil {
			return err
		}
		g.log.Info("written: kubelet sees the same pod, nothing restarts", "component", c.Component)
	}
	// The staging leftovers planRender saw past go before the transaction
	// plans again, against the directory as it is.
	sw, err := store.Sweep()
	if err != nil {
		return err
	}
	if len(sw.Swept) > 0 {
		g.log.Info("swept staging leftovers before the transaction", "swept", sw.Swept)
	}
	if !g.json() {
		fmt.Fprintf(g.stdout, "%s: the manifests of running components change (%s): one transaction, one component at a time with the waits (--all-at-once writes every manifest at once)\n", command, list(rp.live))
	}
	err = g.driveWith(j, command, func(ctx context.Context, e *engine.Engine, _ *journal.Journal) (engine.Result, error) {
		res, err := e.Apply(ctx, st, opts)
		g.preflightRefused(err)
		return res, err
	})
	if err != nil && carried {
		g.putBackQuiet(j, store, rp)
	}
	if err != nil {
		return err
	}
	res, err := store.WriteAll(st)
	if err != nil {
		return err
	}
	if len(res.Written) > 0 || len(res.Removed) > 0 {
		g.log.Info("after the transaction", "written", res.Written, "removed", res.Removed)
		if !g.json() {
			fmt.Fprintf(g.stdout, "also written: %s; removed (not in the roster): %s\n", list(res.Written), list(res.Removed))
		}
	}
	return nil
}

// putBackQuiet writes back the manifests renderLive wrote outside a
// transaction that did not commit, rp's quiet components, as they were on
// disk before: kubelet sees the same pod either way, so nothing restarts.
// Not while a transaction is open (interrupted, or its rollback failed):
// its snapshot holds them as written, and resume or rollback finishes it.
func (g *globals) putBackQuiet(j *journal.Journal, store *manifest.Store, rp *renderPlan) {
	if open, err := j.OpenTxn(); err != nil || open != nil {
		return
	}
	for _, c := range rp.plan.Changes {
		if !slices.Contains(rp.quiet, c.Component) {
			continue
		}
		if _, err := store.Put(c.Component, c.Before); err != nil {
			g.log.Warn("the manifest written outside the transaction is not put back; kubelet sees the same pod", "component", c.Component, "err", err)
			continue
		}
		g.log.Info("put back as it was: kubelet sees the same pod, nothing restarts", "component", c.Component)
	}
}

// refusedRender is planRender's refusal err for command: a shadowing
// stray is refused before anything is written, and says so.
func refusedRender(command string, err error) error {
	if errors.Is(err, manifest.ErrShadowed) {
		return fmt.Errorf("%s: refused, nothing is written: %w", command, err)
	}
	return err
}

// sameToKubelet reports whether before, a manifest on disk, and after, its
// render, are one pod to kubelet (kubeletpod.Same); false when either is
// absent or does not decode.
func sameToKubelet(before, after []byte) bool {
	if before == nil {
		return false
	}
	a, err := kubeletpod.Decode(before)
	if err != nil {
		return false
	}
	b, err := kubeletpod.Decode(after)
	return err == nil && kubeletpod.Same(a, b)
}

// dryRun is init's and render's --dry-run against the manifest directory,
// opened read-only: what the render of st would change and how, with a
// diff of each manifest; nothing is written.
func (g *globals) dryRun(command string, st *nodestate.NodeState) error {
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		return err
	}
	rp, err := g.planRender(store, st)
	if err != nil {
		return refusedRender(command+" --dry-run", err)
	}
	return g.printDryRun(command, store.Dir(), st, rp)
}

// printDryRun prints rp for dryRun: notes says what it would write and
// how, dir's diffs what would change.
func (g *globals) printDryRun(command string, dir string, st *nodestate.NodeState, rp *renderPlan) error {
	rep := &dryRunReport{Command: command}
	if rp.noTxn != nil {
		rep.note("no transaction can make this render (%v): what changes would be written at once, without the waits", rp.noTxn)
		return g.printDryRunReport(rep)
	}
	if rp.plan == nil && len(rp.removes) == 0 {
		rep.Nothing = true
		rep.note("nothing would change: every manifest in %s is the render of the node state (%s, %s)", dir, st.NodeName, st.KubernetesVersion)
		return g.printDryRunReport(rep)
	}
	if rp.plan != nil {
		how := "all at once (no component of them runs)"
		if len(rp.quiet) > 0 {
			how = "at once"
		}
		if len(rp.live) > 0 {
			how = fmt.Sprintf("as one transaction, one component at a time with the waits (%s running)", list(rp.live))
			rep.Transaction = true
		}
		rep.note("would write %s %s", list(rp.plan.Changed()), how)
		if len(rp.quiet) > 0 {
			rep.note("%s: kubelet sees the same pod in the render (only how it is written differs), so it is written at once and nothing restarts", list(rp.quiet))
		}
	}
	if len(rp.removes) > 0 {
		rep.note("would remove %s (not in the node's roster)", list(rp.removes))
		rep.Removes = rp.removes
	}
	if rp.plan != nil {
		rep.addChanges(dir, "render", rp.plan.Changes)
	}
	return g.printDryRunReport(rep)
}
