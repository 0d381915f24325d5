package engine

// A change of node state as one transaction (apply --state): which fields a
// transaction can change, and the plan of it. An upgrade to a release is
// the case where the target state is the release applied to the current
// one (PlanUpgrade); both go through planTo.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// ErrUnsupportedChange is wrapped by every *StateChangeError.
var ErrUnsupportedChange = errors.New("a change of node state that a transaction cannot make")

// StateChangeError is a target node state that differs from the current
// one in a field no transaction of manifests can change safely: the node's
// or the etcd member's identity, or the roster shrinking. Nothing was
// written.
type StateChangeError struct {
	// Field is the node state's field, as the YAML names it
	// (etcd.dataDir).
	Field    string
	From, To string
	// Why says what the change would need that a manifest rewrite is not.
	Why string
}

func (e *StateChangeError) Error() string {
	return fmt.Sprintf("%s: %q -> %q cannot be changed by a transaction: %s; nothing was written", e.Field, e.From, e.To, e.Why)
}

// Unwrap makes errors.Is(err, ErrUnsupportedChange) hold.
func (e *StateChangeError) Unwrap() error { return ErrUnsupportedChange }

// fixedFields are the node state's fields a transaction refuses to change,
// each with its value and the reason. A rewrite of the manifests changes
// what each component runs with; these name what the node or its etcd
// member is, and changing them takes steps outside the manifests.
func fixedFields(st *nodestate.NodeState) []struct{ field, value, why string } {
	return []struct{ field, value, why string }{
		{"nodeName", st.NodeName, "it is kubelet's node name, which the mirror pods and kube-vip use; kubelet's own configuration changes with it"},
		{"advertiseAddress", st.AdvertiseAddress, "etcd's peer URL and member record, the serving certificates and the other nodes name it; it moves only with an etcd member update and new certificates"},
		{"etcd.memberName", st.Etcd.MemberName, "it is the etcd member's name in the cluster's member list"},
		{"etcd.initialCluster", st.Etcd.InitialCluster, "etcd reads it only when it creates its data; the cluster's membership changes with etcdctl member commands, not a manifest"},
		{"etcd.dataDir", st.Etcd.DataDir, "etcd's data would have to move with it, and a rollback restores etcd's data into the old directory; stop etcd and move its data by hand instead"},
		{"ports.etcdPeer", fmt.Sprint(st.Ports.EtcdPeer), "it is part of the etcd member's peer URL in the member list"},
		{"configDir", st.ConfigDir, "the render-derived files would be written to the new directory and a rollback only restores the old one"},
	}
}

// CheckStateChange refuses a target node state to that a transaction from
// st cannot carry out: a change of a field of fixedFields
// (*StateChangeError), a change of the stopped list (stop and start change
// it), or a component of st's roster that to drops (the kube-vip of a vip
// removed): a transaction of kind upgrade writes manifests, it does not
// stop components. Both states are validated already.
func CheckStateChange(st, to *nodestate.NodeState) error {
	if !slices.Equal(st.Stopped, to.Stopped) {
		return &StateChangeError{Field: "stopped", From: strings.Join(st.Stopped, ","), To: strings.Join(to.Stopped, ","),
			Why: "components are stopped and started by the stop and start commands, each with its own waits; give the state file the stopped list the node has (status shows it)"}
	}
	from, want := fixedFields(st), fixedFields(to)
	for i, f := range from {
		if f.value != want[i].value {
			return &StateChangeError{Field: f.field, From: f.value, To: want[i].value, Why: f.why}
		}
	}
	for _, comp := range manifest.NamesFor(st) {
		if !slices.Contains(manifest.NamesFor(to), comp) {
			return &StateChangeError{Field: "vip", From: "set", To: "unset",
				Why: "the transaction would have to stop " + comp + " and remove its manifest, which it does not do"}
		}
	}
	return nil
}

// PlanState computes the change of the node from st to the node state to,
// against the manifests on disk, with the pre-flight checks PlanUpgrade
// runs (the upgrade-path rules between the two states' versions, and etcd's
// health when etcd's manifest changes). A field a transaction cannot change
// is refused first (CheckStateChange). A state that changes no manifest is
// ErrNothingToDo.
func PlanState(ctx context.Context, store Manifests, procs Processes, st, to *nodestate.NodeState, opts UpgradeOptions) (*Plan, error) {
	if err := CheckStateChange(st, to); err != nil {
		return nil, err
	}
	pf := preflight{ignore: opts.IgnorePreflight, members: opts.members, kubelet: liveKubelet{read: opts.Kubelet, log: opts.log}, procs: procs, subject: "node state " + to.KubernetesVersion, state: true, history: opts.history}
	plan, err := planTo(ctx, store, st, to, pf)
	if err != nil {
		return nil, err
	}
	if len(plan.Changes) == 0 {
		return nil, fmt.Errorf("%w: the node state changes no manifest of this node (every manifest is its render already)", ErrNothingToDo)
	}
	return plan, nil
}

// planTo is the plan of a transaction from st to to, with pf's pre-flight
// checks settled. An empty Changes is returned as it is: the caller says
// why there is nothing to do.
func planTo(ctx context.Context, store Manifests, st, to *nodestate.NodeState, pf preflight) (*Plan, error) {
	if err := CheckIgnore(pf.ignore); err != nil {
		return nil, err
	}
	from, target := resolve.Resolve(st), resolve.Resolve(to)
	if err := checkKubernetesVersion(from, target); err != nil {
		return nil, fmt.Errorf("%s: %w", pf.subject, err)
	}
	findings := versions.UpgradePath(from, target)
	back, err := versions.CheckBinaryRollback(from, target, pf.history)
	if err != nil {
		return nil, err
	}
	findings = append(findings, back...)
	plan, err := planChanges(store, st, to)
	if err != nil {
		// A target the rules refuse may not render at all (an
		// unsupported version): the refusal says why.
		if _, perr := pf.settle(findings); perr != nil {
			return nil, perr
		}
		return nil, err
	}
	if len(plan.Changes) == 0 {
		return plan, nil
	}
	etcdChanges := slices.Contains(plan.Changed(), nodestate.Etcd)
	if etcdChanges {
		if f := pf.etcdHealth(ctx, st); f != nil {
			findings = append(findings, *f)
		}
		findings = append(findings, pf.etcdWAL(st, to)...)
	}
	live := pf.kubelet.version(ctx)
	findings = append(findings, emulationFindings(target, to, live)...)
	findings = append(findings, staticPodFindings(plan, live, to.KubernetesVersion)...)
	if plan.Ignored, err = pf.settle(findings); err != nil {
		return nil, err
	}
	planReplacements(plan, store, pf.procs)
	if etcdChanges && pf.members <= 1 {
		// A single member (or one not known to be of several) has its
		// data restored by a rollback.
		if err := etcddata.CheckDataDir(st); err != nil {
			return nil, fmt.Errorf("%s changes etcd, but a rollback could not restore etcd's data: %w", pf.subject, err)
		}
	}
	return plan, nil
}

// describe is the begin event's account of a transaction's plan: "upgrade
// to v1.37.2: etcd, kube-apiserver change" or, for a node state, "apply
// node state v1.36.3: kube-apiserver change".
func describe(plan *Plan, release bool) string {
	what := "apply node state " + plan.To.KubernetesVersion
	if release {
		what = "upgrade to " + plan.To.KubernetesVersion
	}
	return fmt.Sprintf("%s: %s change", what, strings.Join(plan.Changed(), ", "))
}

// checkKubernetesVersion refuses a target whose kubernetesVersion is not
// kube-apiserver's version (*resolve.KubernetesVersionError): the node
// state would say one version while the control plane runs another. A
// disagreement the node has already (the same kubernetesVersion and
// kube-apiserver image on both sides, as a node state recorded before the
// check) is not the change's doing, and is let through so that such a node
// can still be rendered and changed.
func checkKubernetesVersion(st, to *resolve.Node) error {
	err := resolve.CheckKubernetesVersion(to)
	if err == nil || st.State.KubernetesVersion == to.State.KubernetesVersion && st.Image(nodestate.KubeAPIServer) == to.Image(nodestate.KubeAPIServer) {
		return nil
	}
	return err
}
