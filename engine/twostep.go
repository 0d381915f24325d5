package engine

// Two-step minor upgrades (KEP-4330): run --to with TwoStep takes the
// binary step (the new binaries, emulating the minor they replace), Finish
// takes the finishing step (the emulation dropped) as its own transaction,
// and a binary going back a minor after a finishing step is refused
// (versions.CheckBinaryRollback), from the journal's committed
// transactions.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// ErrNoMinorMove is the refusal of a two-step binary step whose release
// moves no Kubernetes binary up a minor: there is nothing to emulate.
var ErrNoMinorMove = errors.New("a two-step upgrade needs a minor move")

// binaryStep makes to, the node state a release takes st to, the binary
// step of a two-step upgrade: each Kubernetes component whose binary moves
// up a minor keeps the minor it ran at with --emulated-version (an
// operator's explicit value stands). ErrNoMinorMove when none moves.
func binaryStep(st, to *nodestate.NodeState) error {
	args := versions.BinaryStep(resolve.Resolve(st), resolve.Resolve(to))
	if len(args) == 0 {
		v, _ := kubeAPIServer(st)
		at := "its minor"
		if v != nil {
			at = versions.MinorOf(v)
		}
		return fmt.Errorf("%w: release %s moves no kube-apiserver, kube-controller-manager or kube-scheduler binary up a minor (kube-apiserver stays at %s), so there is no older minor to emulate; run it without --two-step", ErrNoMinorMove, to.KubernetesVersion, at)
	}
	for _, c := range slices.Sorted(maps.Keys(args)) {
		to.SetExtraArg(c, versions.FlagEmulatedVersion, args[c])
	}
	return nil
}

// FinishState is the node state of st's finishing step: every Kubernetes
// component that emulates a minor older than its binary's runs at its
// binary's (its --emulated-version dropped). ErrNothingToDo when none
// emulates an older minor. st is unchanged.
func FinishState(st *nodestate.NodeState) (*nodestate.NodeState, error) {
	n := resolve.Resolve(st)
	to := st.Clone()
	var raised []string
	for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		if bin, at, ok := versions.Emulating(n, c); !ok || !at.LessThan(bin) {
			continue
		}
		to.DeleteExtraArg(c, versions.FlagEmulatedVersion)
		raised = append(raised, c)
	}
	if len(raised) == 0 {
		return nil, fmt.Errorf("%w: no two-step upgrade to finish: kube-apiserver, kube-controller-manager and kube-scheduler emulate no minor older than their binaries'", ErrNothingToDo)
	}
	return to, nil
}

// PlanFinish is the finishing step's plan (finish --dry-run), with every
// pre-flight check run, writing nothing.
func (e *Engine) PlanFinish(ctx context.Context, opts UpgradeOptions) (*Plan, error) {
	st, err := e.j.NodeState()
	if err != nil {
		return nil, err
	}
	to, err := FinishState(st)
	if err != nil {
		return nil, err
	}
	return e.PlanState(ctx, to, opts)
}

// Finish takes the finishing step of the node's two-step upgrade as one
// transaction of kind upgrade (no release), as Apply does of FinishState:
// the components run at their binaries' minor. rollback --last of it
// lowers the emulated version again. On a multi-member cluster it is
// refused while another control-plane node's kube-apiserver still runs
// an older minor (CheckEmulationClusterSkew). ErrNothingToDo when no
// two-step upgrade is pending.
func (e *Engine) Finish(ctx context.Context, opts UpgradeOptions) (Result, error) {
	what := func(p *Plan) string {
		if ts, ok := versions.PendingTwoStep(resolve.Resolve(p.From)); ok {
			return fmt.Sprintf("finish the two-step upgrade to %s (was emulating %s): %s change", ts.Binary, ts.Emulated, strings.Join(p.Changed(), ", "))
		}
		return fmt.Sprintf("finish the two-step upgrade: %s change", strings.Join(p.Changed(), ", "))
	}
	return e.change(ctx, journal.KindUpgrade, nil, opts.IgnorePreflight, what, func(t topology) (*Plan, error) {
		opts.members = t.members
		return e.PlanFinish(ctx, opts)
	})
}

// ranStates is the node's committed transactions, newest first, as
// versions.CheckBinaryRollback reads them: but restarts (they change
// nothing), the transaction except (a rollback --last's undone one) and
// one whose node state no longer parses. Only reading the journal fails
// it.
func (e *Engine) ranStates(except string) ([]versions.Ran, error) {
	return ranStates(e.j, except)
}

func ranStates(j *journal.Journal, except string) ([]versions.Ran, error) {
	hist, err := j.History(0)
	if err != nil {
		return nil, err
	}
	var out []versions.Ran
	for _, t := range hist {
		if t.Phase != journal.PhaseCommitted || t.Kind == journal.KindRestart || t.ID == except || len(t.To) == 0 {
			continue
		}
		// A node state an older stratum-upgrade journaled may not pass
		// today's validation: it is passed over, not fatal. A finishing
		// step is this version's, and its states parse.
		to, err := nodestate.Parse(t.To)
		if err != nil {
			continue
		}
		r := versions.Ran{Txn: t.ID, To: resolve.Resolve(to)}
		if from, err := nodestate.Parse(t.From); err == nil && len(t.From) > 0 {
			r.From = resolve.Resolve(from)
		}
		out = append(out, r)
	}
	return out, nil
}

// WithJournal is opts with what j says the node ran, for the
// EmulationFinished check of a plan made outside an Engine (an Engine's
// plans read it themselves). j is read only if the plan moves a binary
// back a minor, and must stay open until then.
func (opts UpgradeOptions) WithJournal(j *journal.Journal) UpgradeOptions {
	opts.history = func() ([]versions.Ran, error) { return ranStates(j, "") }
	return opts
}

// CheckEmulationClusterSkew is the check that a two-step upgrade's
// finishing step on one control-plane node waits for every other one to
// have taken the binary step: while another node's kube-apiserver still
// runs the older minor, this one must keep emulating it (the version skew
// policy, which KEP-4330 applies to the emulated versions, and the way
// back of the whole cluster). A node whose version cannot be read refuses
// too, but that may be ignored.
const CheckEmulationClusterSkew = "EmulationClusterSkew"

// finishSkew is the EmulationClusterSkew check of a move from st to to
// that raises the minor kube-apiserver emulates (a finishing step), by
// what the other control-plane nodes run now or last recorded.
func (e *Engine) finishSkew(ctx context.Context, st, to *nodestate.NodeState) ([]versions.Finding, error) {
	ts, ok := versions.PendingTwoStep(resolve.Resolve(st))
	if !ok {
		return nil, nil
	}
	if after, still := versions.PendingTwoStep(resolve.Resolve(to)); still && after.Emulated == ts.Emulated {
		return nil, nil
	}
	bin := version.MustParseGeneric(ts.Binary)
	var out []versions.Finding
	check := func(node string, vs []string, source string) bool {
		return eachVersion(vs, func(s string, ov *version.Version) {
			if ov.Major() == bin.Major() && ov.Minor() < bin.Minor() {
				out = append(out, versions.Finding{Check: CheckEmulationClusterSkew, Component: nodestate.KubeAPIServer, Unsupported: true, Message: fmt.Sprintf(
					"kube-apiserver on node %s still runs %s (%s): this node's finishing step would stop emulating %s while a node runs it, and the cluster's way back to %s rests on every node emulating it until all run %s binaries; this cannot be ignored. Take the binary step on node %s first (run --to with --two-step), then finish here",
					node, s, source, ts.Emulated, ts.Emulated, ts.Binary, node)})
			}
		})
	}
	unknown := func(what string) {
		out = append(out, versions.Finding{Check: CheckEmulationClusterSkew, Component: nodestate.KubeAPIServer, Message: fmt.Sprintf(
			"%s: the finishing step waits until every control-plane node runs %s binaries; check that each does, then let this through with --ignore-preflight-errors=%s", what, ts.Binary, CheckEmulationClusterSkew)})
	}
	err := e.peerAPIServers(ctx, st, "the finishing step to "+ts.Binary, check, unknown)
	return out, err
}
