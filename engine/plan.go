package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/snapshot"
	"github.com/ciq/stratum-upgrade/versions"
)

// Plan is what a transaction would change, computed without writing.
type Plan struct {
	From, To *nodestate.NodeState
	// Changes lists, in roster order, every component whose manifest bytes
	// on disk differ from what the transaction would write.
	Changes []Change
	// Derived are the files kube-apiserver's manifest names besides the
	// node state (the cis profile's admission configuration), rendered from
	// the profile files as they were read once, at planning.
	Derived []manifest.DerivedFile
	// Ignored are the pre-flight checks that failed and were let through
	// (UpgradeOptions.IgnorePreflight), in the order of PreflightChecks.
	Ignored []versions.Finding
	// Replacements says, for each changed component that can surge at
	// all, whether it will (surge.go), as the live node is at planning.
	Replacements map[string]Replacement
}

// Targets are the exact bytes the transaction writes, journaled when it
// begins: every write and every resume writes these. kube-apiserver's
// target carries the derived files, which are written before it.
func (p *Plan) Targets() []journal.Target {
	out := make([]journal.Target, len(p.Changes))
	for i, c := range p.Changes {
		out[i] = journal.Target{Component: c.Component, Manifest: c.After}
		if c.Component == nodestate.KubeAPIServer {
			for _, d := range p.Derived {
				out[i].Derived = append(out[i].Derived, journal.File{Path: d.Path, Data: d.Data, Mode: d.Mode})
			}
		}
	}
	return out
}

// Change is one component's manifest before and after.
type Change struct {
	Component string
	// Before is the manifest on disk (nil when there is none); After is what
	// the transaction writes.
	Before, After []byte
	// EditedByHand: Before is not the render of the node state the
	// transaction starts from (manifest.MatchesRender): the write puts the
	// render back and undoes the edit.
	EditedByHand bool
	// Released: the release changes the component's render. A change that
	// is EditedByHand and not Released only undoes the edit.
	Released bool
	// InputsChanged: Before is the render of the node state the
	// transaction starts from but for manifest.InputsAnnotation (a
	// start-only input file changed since it was written, or it predates
	// the annotation): the write restarts the component on the files as
	// they are now. Such a change is not EditedByHand.
	InputsChanged bool
}

// InputsChanged is the changing components whose start-only input files
// changed since their manifest was written, in roster order.
func (p *Plan) InputsChanged() []string {
	return p.components(func(c Change) bool { return c.InputsChanged })
}

// EditedByHand is the changing components whose manifest on disk was
// edited by hand, in roster order.
func (p *Plan) EditedByHand() []string {
	return p.components(func(c Change) bool { return c.EditedByHand })
}

// Released is the components whose render the release changes, in roster
// order.
func (p *Plan) Released() []string {
	return p.components(func(c Change) bool { return c.Released })
}

// components is the changing components keep holds for, in roster order.
func (p *Plan) components(keep func(Change) bool) []string {
	var out []string
	for _, c := range p.Changes {
		if keep(c) {
			out = append(out, c.Component)
		}
	}
	return out
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
// disk, and runs the pre-flight checks before anything is written: the
// upgrade-path rules (versions.UpgradePath) and, when the release changes
// etcd, etcd's health (one request through procs). Every failed check that
// opts does not ignore is reported at once, in a *PreflightError; the
// ignored ones are Plan.Ignored. Each component keeps the restarted-at
// annotation it has on disk, so a component changes exactly when the
// release changes its render (or a hand edit is to be overwritten). A
// release that changes nothing is ErrNothingToDo.
func PlanUpgrade(ctx context.Context, store Manifests, procs Processes, st *nodestate.NodeState, rel *Release, opts UpgradeOptions) (*Plan, error) {
	if err := CheckIgnore(opts.IgnorePreflight); err != nil {
		return nil, err
	}
	to, err := rel.Apply(st)
	if err != nil {
		return nil, err
	}
	if opts.TwoStep {
		if err := binaryStep(st, to); err != nil {
			return nil, err
		}
	}
	pf := preflight{ignore: opts.IgnorePreflight, members: opts.members, kubelet: liveKubelet{read: opts.Kubelet, log: opts.log}, procs: procs, subject: "release " + rel.KubernetesVersion, history: opts.history}
	plan, err := planTo(ctx, store, st, to, pf)
	if err != nil {
		return nil, err
	}
	if len(plan.Changes) == 0 {
		return nil, fmt.Errorf("%w: release %s changes no manifest of this node (it is already at those images)", ErrNothingToDo, rel.KubernetesVersion)
	}
	return plan, nil
}

// planChanges is every component whose manifest on disk differs from the
// render of to.
func planChanges(store Manifests, st, to *nodestate.NodeState) (*Plan, error) {
	prof, err := manifest.LoadProfile(to)
	if err != nil {
		return nil, err
	}
	if err := store.CheckShadows(manifest.NamesFor(to)); err != nil {
		return nil, err
	}
	derived, err := manifest.DerivedFiles(to, prof)
	if err != nil {
		return nil, err
	}
	plan := &Plan{From: st, To: to, Derived: derived}
	fromRoster := manifest.NamesFor(st)
	// st's files are read once for every component: each load reads every
	// start-only input file of the roster.
	fromProf, fromErr := manifest.LoadProfile(st)
	for _, comp := range manifest.NamesFor(to) {
		before, stamp, err := onDisk(store, comp)
		if err != nil {
			return nil, err
		}
		after, err := manifest.RenderBytes(to, prof, comp, stamp)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(before, after) {
			continue
		}
		c := Change{Component: comp, Before: before, After: after, Released: true}
		if slices.Contains(fromRoster, comp) {
			// The release changes the component when after differs from
			// what the node state renders now, with the same stamp; the
			// file was edited by hand when it is not that render (stamp is
			// before's own, so this is manifest.MatchesRender, as status's
			// "differs"), unless only its start-only inputs moved.
			var prev []byte
			err := fromErr
			if err == nil {
				prev, err = manifest.RenderBytes(st, fromProf, comp, stamp)
			}
			if err == nil {
				c.Released = !bytes.Equal(prev, after)
			}
			if before != nil && (err != nil || !bytes.Equal(prev, before)) {
				c.InputsChanged = fromErr == nil && manifest.InputsOnly(st, fromProf, comp, before)
				c.EditedByHand = !c.InputsChanged
			}
		}
		plan.Changes = append(plan.Changes, c)
	}
	return plan, nil
}

// onDisk is comp's manifest bytes and restarted-at stamp as on disk; both
// empty when there is no manifest. A manifest that a snapshot restore would
// refuse (it does not decode strictly as comp's pod) is an error: the
// transaction could snapshot it but never roll back to it.
func onDisk(store Manifests, comp string) ([]byte, string, error) {
	b, err := store.Read(comp)
	if errors.Is(err, manifest.ErrNoManifest) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	pod, err := manifest.DecodePod(b)
	if err == nil && pod.Labels["component"] != comp {
		err = fmt.Errorf("it is a pod of component %q", pod.Labels["component"])
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: manifest %s does not decode as the %s pod (%v): an upgrade could not roll back to it", ErrUnrestorable, store.Path(comp), comp, err)
	}
	return b, manifest.RestartedAt(pod), nil
}

// planFromSnapshot is the plan of a rollback-last: every component whose
// manifest on disk differs from the retained snapshot's, but for the
// restarted-at stamp, which is kept as on disk.
func planFromSnapshot(store Manifests, cur, old *nodestate.NodeState, snap *snapshot.Loaded) (*Plan, error) {
	if err := store.CheckShadows(manifest.NamesFor(old)); err != nil {
		return nil, err
	}
	if err := checkEtcdDowngrade(cur, old); err != nil {
		return nil, err
	}
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

// checkEtcdDowngrade refuses to put back an etcd more than one minor
// lower, or below 3.6 from 3.5: once the newer member ran, the cluster and
// storage versions in its data are the newer ones and an older etcd
// refuses to start on it. One minor down from 3.6 on, the etcd step first
// moves the data back with etcd's own downgrade protocol
// (downgradeBeforeStep), which goes one minor at a time.
func checkEtcdDowngrade(cur, old *nodestate.NodeState) error {
	curImg, oldImg := resolve.Image(cur, nodestate.Etcd), resolve.Image(old, nodestate.Etcd)
	curMaj, curMin, ok1 := resolve.TagMinor(curImg)
	oldMaj, oldMin, ok2 := resolve.TagMinor(oldImg)
	if !ok1 || !ok2 || oldMaj > curMaj || oldMaj == curMaj && oldMin >= curMin {
		return nil
	}
	if oldMaj == curMaj && oldMin == curMin-1 && curMaj == 3 && curMin >= 6 {
		return nil
	}
	return fmt.Errorf("rollback --last would move etcd from %s down to %s: etcd's downgrade protocol goes back one minor at a time, from 3.6 on, and etcd %d.%d refuses to start on data a %d.%d member has run on; run an upgrade to a release that keeps etcd at %d.%d, or downgrade etcd a minor at a time with etcdctl downgrade first",
		curImg, oldImg, oldMaj, oldMin, curMaj, curMin, curMaj, curMin)
}
