package engine

// stop and start: the seed's Stop and Start verbs as transactions. A stop
// removes components' manifests and waits until their processes are gone;
// its commit lists them in the node state's stopped list, so that no render
// (render, run, apply, resume) brings them back. A start renders them again
// and waits for them to answer; its commit takes them off the list.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// ErrControlPlaneDown is the refusal of a stop that would take the control
// plane down: etcd or kube-apiserver on the only control-plane node.
var ErrControlPlaneDown = errors.New("the stop would take the control plane down")

// ErrStopLeavesDependent is the refusal of a stop that would leave running a
// component that cannot run without one it stops: kube-apiserver without
// the local etcd it serves from.
var ErrStopLeavesDependent = errors.New("the stop would leave a component without what it runs on")

// apiServerUsesLocalEtcd reports whether st's kube-apiserver reaches etcd
// only through this node's member: the rendered --etcd-servers, which an
// extra arg may replace with other members.
func apiServerUsesLocalEtcd(st *nodestate.NodeState) bool {
	_, set := st.ExtraArgs[nodestate.KubeAPIServer]["etcd-servers"]
	return !set
}

// StopOptions are the options of a stop.
type StopOptions struct {
	// AllowControlPlaneDown lets etcd and kube-apiserver be stopped on a
	// node whose etcd is the cluster's only member.
	AllowControlPlaneDown bool
	// members is the cluster's member count the transaction read from
	// etcd's member list (topology.go); 0 is unknown and refused as one.
	members int
}

// PlanStop is the plan of stopping comps (every running component when
// empty), in roster order: each target is no manifest, and the plan's To
// is st with comps on its stopped list. A component that is not running
// per st (stopped already, or not this node's) is an error wrapping
// ErrUnknownComponent or ErrNothingToDo; etcd or kube-apiserver on a
// single-member node is refused with ErrControlPlaneDown unless opts
// allows it, and etcd without the kube-apiserver that serves from it with
// ErrStopLeavesDependent. Nothing is written.
func PlanStop(store Manifests, st *nodestate.NodeState, comps []string, opts StopOptions) (*Plan, error) {
	running := manifest.NamesFor(st)
	comps, err := verbComponents(st, comps, running, "running", "stopped already")
	if err != nil {
		return nil, err
	}
	if opts.members <= 1 && !opts.AllowControlPlaneDown {
		for _, c := range comps {
			if c == nodestate.Etcd || c == nodestate.KubeAPIServer {
				return nil, fmt.Errorf("%w: %s runs on the only control-plane node (etcd has one member): the API server is unreachable until it is started again", ErrControlPlaneDown, c)
			}
		}
	}
	if slices.Contains(comps, nodestate.Etcd) && slices.Contains(running, nodestate.KubeAPIServer) && !slices.Contains(comps, nodestate.KubeAPIServer) && apiServerUsesLocalEtcd(st) {
		return nil, fmt.Errorf("%w: kube-apiserver on this node serves from its local etcd (--etcd-servers): without it the API server fails the verify and the stop rolls back; stop both (kube-apiserver etcd)", ErrStopLeavesDependent)
	}
	to := st.Clone()
	for _, c := range st.Roster() {
		if slices.Contains(comps, c) && !to.IsStopped(c) {
			to.Stopped = append(to.Stopped, c)
		}
	}
	to.Stopped = inRosterOrder(st, to.Stopped)
	plan := &Plan{From: st, To: to}
	for _, c := range comps {
		before, _, err := onDisk(store, c)
		if err != nil {
			return nil, err
		}
		plan.Changes = append(plan.Changes, Change{Component: c, Before: before})
	}
	return plan, nil
}

// PlanStart is the plan of starting comps (every stopped component when
// empty), in roster order: each target is its render of the plan's To (st
// without comps on its stopped list) with the restarted-at stamp, new, so
// that kubelet runs a pod it never terminated. A component that is not
// stopped is an error (ErrNothingToDo, or ErrUnknownComponent when the
// node does not have it). Nothing is written.
func PlanStart(store Manifests, st *nodestate.NodeState, comps []string, stamp string) (*Plan, error) {
	comps, err := verbComponents(st, comps, st.Stopped, "stopped", "not stopped (start brings back only what stop stopped)")
	if err != nil {
		return nil, err
	}
	to := st.Clone()
	to.Stopped = slices.DeleteFunc(to.Stopped, func(c string) bool { return slices.Contains(comps, c) })
	if len(to.Stopped) == 0 {
		to.Stopped = nil
	}
	if err := store.CheckShadows(manifest.NamesFor(to)); err != nil {
		return nil, err
	}
	prof, err := manifest.LoadProfile(to)
	if err != nil {
		return nil, err
	}
	plan := &Plan{From: st, To: to}
	if slices.Contains(comps, nodestate.KubeAPIServer) {
		if plan.Derived, err = manifest.DerivedFiles(to, prof); err != nil {
			return nil, err
		}
	}
	for _, c := range comps {
		before, _, err := onDisk(store, c)
		if err != nil {
			return nil, err
		}
		after, err := manifest.RenderBytes(to, prof, c, stamp)
		if err != nil {
			return nil, err
		}
		plan.Changes = append(plan.Changes, Change{Component: c, Before: before, After: after})
	}
	return plan, nil
}

// verbComponents checks comps against the components the verb acts on
// (from: the running ones for a stop, the stopped ones for a start) and
// returns them in roster order; none means all of from, and from empty
// is ErrNothingToDo.
func verbComponents(st *nodestate.NodeState, comps, from []string, state, other string) ([]string, error) {
	roster := st.Roster()
	for _, c := range comps {
		switch {
		case !slices.Contains(roster, c):
			return nil, fmt.Errorf("%w: %q (this node has %s)", ErrUnknownComponent, c, strings.Join(roster, ", "))
		case !slices.Contains(from, c):
			return nil, fmt.Errorf("%w: %s is %s", ErrNothingToDo, c, other)
		}
	}
	if len(comps) == 0 {
		comps = from
	}
	if len(comps) == 0 {
		return nil, fmt.Errorf("%w: no component is %s", ErrNothingToDo, state)
	}
	return inRosterOrder(st, comps), nil
}

// inRosterOrder is comps, once each, in st's roster order.
func inRosterOrder(st *nodestate.NodeState, comps []string) []string {
	var out []string
	for _, c := range st.Roster() {
		if slices.Contains(comps, c) {
			out = append(out, c)
		}
	}
	return out
}

// Stop stops comps (every running component when empty) as one
// transaction of kind stop, in roster order: snapshot; for each, its
// manifest removed and its processes waited out (Deadlines.Stop); verify
// that every component still running answers through the soak; commit,
// which puts comps on the node state's stopped list. A failure rolls back
// to the snapshot (the manifests back, the components waited for). Refused
// as PlanStop says, and as Run is while a transaction is open.
func (e *Engine) Stop(ctx context.Context, comps []string, opts StopOptions) (Result, error) {
	return e.verb(ctx, journal.KindStop, func(st *nodestate.NodeState, t topology) (*Plan, error) {
		opts.members = t.members
		return PlanStop(e.store, st, comps, opts)
	})
}

// Start starts comps (every stopped component when empty) as one
// transaction of kind start, in roster order: snapshot; each written from
// the node state with the waits for kubelet to start it and for it to
// answer; verify and the soak; commit, which takes comps off the stopped
// list. A failure rolls back: the manifests removed again, the processes
// waited out.
func (e *Engine) Start(ctx context.Context, comps []string) (Result, error) {
	return e.verb(ctx, journal.KindStart, func(st *nodestate.NodeState, _ topology) (*Plan, error) {
		return PlanStart(e.store, st, comps, e.store.Stamp())
	})
}

// verb begins and drives a restart, stop or start (kind) of the plan that
// plan makes from the journal's node state; its begin event reads
// "KIND: COMPONENTS". plan is given the node's topology too.
func (e *Engine) verb(ctx context.Context, kind string, plan func(*nodestate.NodeState, topology) (*Plan, error)) (Result, error) {
	return e.change(ctx, kind, nil, nil, func(p *Plan) string {
		return kind + ": " + strings.Join(p.Changed(), ", ")
	}, func(t topology) (*Plan, error) {
		st, err := e.j.NodeState()
		if err != nil {
			return nil, err
		}
		return plan(st, t)
	})
}

// waitStopped is the rest of a stop's step once comp's manifest is
// removed: its processes (as the node state before the stop finds them)
// waited out.
func (e *Engine) waitStopped(ctx context.Context, r *run, p journal.Phase, comp string, t0 time.Time) error {
	t, err := manifest.Target(r.from, comp)
	if err != nil {
		return err
	}
	e.event(r.txn.ID, p, "wait-gone", comp, comp+" to exit", "waiting for "+comp+" to exit")
	if err := e.procs.WaitGone(ctx, t, e.dl.Stop); err != nil {
		return e.waitFailed(comp, err)
	}
	r.steps = append(r.steps, StepTime{Component: comp, Phase: string(p), Elapsed: time.Since(t0)})
	e.event(r.txn.ID, p, "done", comp, "", fmt.Sprintf("%s stopped (%.1fs)", comp, time.Since(t0).Seconds()))
	return nil
}
