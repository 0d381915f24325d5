package engine

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// Plan is what a transaction would change, computed without writing.
type Plan struct {
	From, To *nodestate.NodeState
	// Changes lists, in roster order, every component whose manifest bytes
	// on disk differ from what the transaction would write.
	Changes []Change
}

// Change is one component's manifest before and after.
type Change struct {
	Component string
	// Before is the manifest on disk (nil when there is none); After is what
	// the transaction writes.
	Before, After []byte
}

// Changed is the changing components, in roster order.
func (p *Plan) Changed() []string {
	out := make([]string, len(p.Changes))
	for i, c := range p.Changes {
		out[i] = c.Component
	}
	return out
}

// PlanUpgrade computes the upgrade of st to rel against the manifests on
// disk. Each component keeps the restarted-at annotation it has on disk, so
// a component changes exactly when the release changes its render (or a
// hand edit is to be overwritten). A release that changes nothing is
// ErrNothingToDo.
func PlanUpgrade(store *manifest.Store, st *nodestate.NodeState, rel *Release) (*Plan, error) {
	to, err := rel.Apply(st)
	if err != nil {
		return nil, err
	}
	prof, err := manifest.LoadProfile(to)
	if err != nil {
		return nil, err
	}
	plan := &Plan{From: st, To: to}
	for _, comp := range manifest.NamesFor(to) {
		before, stamp, err := onDisk(store, comp)
		if err != nil {
			return nil, err
		}
		after, err := manifest.RenderBytes(to, prof, comp, stamp)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(before, after) {
			plan.Changes = append(plan.Changes, Change{Component: comp, Before: before, After: after})
		}
	}
	if len(plan.Changes) == 0 {
		return nil, fmt.Errorf("%w: release %s changes no manifest of this node (it is already at those images)", ErrNothingToDo, rel.KubernetesVersion)
	}
	return plan, nil
}

// onDisk is comp's manifest bytes and restarted-at stamp as on disk; both
// empty when there is no manifest or it does not decode.
func onDisk(store *manifest.Store, comp string) ([]byte, string, error) {
	b, err := store.Read(comp)
	if errors.Is(err, manifest.ErrNoManifest) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	pod, err := manifest.DecodePod(b)
	if err != nil {
		return b, "", nil
	}
	return b, manifest.RestartedAt(pod), nil
}

// planFromSnapshot is the plan of a rollback-last: every component whose
// manifest on disk differs from the retained snapshot's, but for the
// restarted-at stamp, which is kept as on disk.
func planFromSnapshot(store *manifest.Store, cur, old *nodestate.NodeState, snap *snapshot.Loaded) (*Plan, error) {
	plan := &Plan{From: cur, To: old}
	for _, comp := range manifest.NamesFor(old) {
		before, stamp, err := onDisk(store, comp)
		if err != nil {
			return nil, err
		}
		want, ok := snap.Manifest(comp)
		if !ok {
			return nil, fmt.Errorf("rollback --last: snapshot %s holds no manifest of %s", snap.Dir, comp)
		}
		after, err := manifest.SetRestartedAt(want, stamp)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(before, after) {
			plan.Changes = append(plan.Changes, Change{Component: comp, Before: before, After: after})
		}
	}
	if len(plan.Changes) == 0 {
		return nil, fmt.Errorf("%w: the manifests on disk already are those of the snapshot", ErrNothingToDo)
	}
	return plan, nil
}
