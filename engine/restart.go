package engine

// restart: components of the node state as it is, replaced one at a time
// as a transaction (the seed's Restart verb with the engine's waits).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// ErrUnknownComponent is wrapped by the error of a restart that names a
// component the node does not run.
var ErrUnknownComponent = errors.New("not a component of this node")

// PlanRestart is the plan of restarting comps (all of st's roster when
// comps is empty), in roster order: each component's target is its render
// of st with the restarted-at stamp, which differs from the one on disk, so
// kubelet replaces its pod. A manifest edited by hand (Change.EditedByHand)
// or whose start-only inputs changed is put back as st renders it. A
// component st's roster lacks is an error wrapping ErrUnknownComponent;
// a name given twice counts once. Nothing is written.
func PlanRestart(store Manifests, st *nodestate.NodeState, comps []string, stamp string) (*Plan, error) {
	roster := manifest.NamesFor(st)
	for _, c := range comps {
		if !slices.Contains(roster, c) {
			return nil, fmt.Errorf("%w: %q (this node runs %s)", ErrUnknownComponent, c, strings.Join(roster, ", "))
		}
	}
	if len(comps) == 0 {
		comps = roster
	}
	if err := store.CheckShadows(roster); err != nil {
		return nil, err
	}
	// What differs already (a hand edit, rotated inputs) is classified as
	// a plan to the same state classifies it.
	cur, err := planChanges(store, st, st)
	if err != nil {
		return nil, err
	}
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		return nil, err
	}
	plan := &Plan{From: st, To: st, Derived: cur.Derived}
	for _, comp := range roster {
		if !slices.Contains(comps, comp) {
			continue
		}
		before, _, err := onDisk(store, comp)
		if err != nil {
			return nil, err
		}
		after, err := manifest.RenderBytes(st, prof, comp, stamp)
		if err != nil {
			return nil, err
		}
		c := Change{Component: comp, Before: before, After: after}
		if i := slices.IndexFunc(cur.Changes, func(d Change) bool { return d.Component == comp }); i >= 0 {
			c.EditedByHand, c.InputsChanged = cur.Changes[i].EditedByHand, cur.Changes[i].InputsChanged
		}
		plan.Changes = append(plan.Changes, c)
	}
	return plan, nil
}

// Restart restarts comps (every component of the node when empty) as one
// transaction of kind restart, in roster order: snapshot; for each, its
// manifest removed, the old process waited out, its render with a new
// restarted-at stamp written, and the waits for kubelet's replacement and
// the new process's health; verify and the soak; commit, with the node
// state unchanged. Any failure rolls back to the snapshot, which restarts
// the components it wrote once more. etcd's data is neither backed up nor
// restored: the same etcd runs on it. Errors and outcomes are Run's; an
// unknown component is refused (ErrUnknownComponent), nothing written.
func (e *Engine) Restart(ctx context.Context, comps []string) (Result, error) {
	return e.verb(ctx, journal.KindRestart, func(st *nodestate.NodeState, _ topology) (*Plan, error) {
		return PlanRestart(e.store, st, comps, e.store.Stamp())
	})
}
