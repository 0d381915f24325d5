package engine

// The cluster-wide skew checks: a node's pre-flight sees only itself, so
// one node could move etcd or kube-apiserver two minors past the others,
// one minor at a time. These run under the rollout lock, right before the
// journal's begin, from what the cluster reports then, never from a node
// state or a name.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// CheckEtcdMemberSkew is the check that an upward etcd minor move leaves
// no member more than one minor behind: every member must report, in its
// status, at least this member's source minor. etcd does not support
// members two minors apart (and 3.7 cannot replay the v2 entries 3.5
// writes). A member whose version cannot be read pauses the run.
const CheckEtcdMemberSkew = "EtcdMemberSkew"

// CheckAPIServerSkew is the check that a kube-apiserver minor move leaves
// every other control-plane node's kube-apiserver, as its last transaction
// in the cluster records it, within one minor of this node's (the version
// skew policy for an HA control plane).
const CheckAPIServerSkew = "APIServerSkew"

// clusterSkew runs both checks for b's plan while this node holds the
// rollout lock (nothing to check without it: a single member). Their
// failures are outside what etcd and Kubernetes support, so none is let
// through; a version that cannot be read pauses (ErrInterrupted).
func (e *Engine) clusterSkew(ctx context.Context, b *beginning) error {
	if e.hold == nil {
		return nil
	}
	etcd, err := e.etcdMemberSkew(ctx, b.plan.From, b.plan.To)
	if err != nil {
		return err
	}
	api, err := e.apiServerSkew(ctx, b.plan.From, b.plan.To)
	if err != nil {
		return err
	}
	_, err = preflight{ignore: b.ignore, subject: b.subject}.settle(append(etcd, api...))
	var pe *PreflightError
	if errors.As(err, &pe) {
		pe.Ignored = append(slices.Clone(b.plan.Ignored), pe.Ignored...)
	}
	return err
}

// etcdMemberSkew is the EtcdMemberSkew check of a move from st to to: an
// upward etcd minor move needs every member at st's minor or later, by the
// version each member's status reports now.
func (e *Engine) etcdMemberSkew(ctx context.Context, st, to *nodestate.NodeState) ([]versions.Finding, error) {
	from, next, moves := etcdMinors(&run{from: st, to: to})
	if !moves || !cluster.MinorAtLeast(next+".0", from) {
		return nil, nil
	}
	h, err := cluster.ReadMembers(ctx, e.hold.Client(), st.Etcd.MemberName)
	if err != nil {
		return nil, fmt.Errorf("%w: etcd %s -> %s waits: the members' etcd versions cannot be read (%v); nothing was written, run it again once etcd answers", ErrInterrupted, from, next, err)
	}
	below, unknown := h.Below(from)
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%w: etcd %s -> %s waits: the etcd version of member %s cannot be read, and this member moves only once every member runs %s or later; nothing was written, run it again once it answers", ErrInterrupted, from, next, strings.Join(unknown, ", "), from)
	}
	if len(below) == 0 {
		return nil, nil
	}
	return []versions.Finding{{Check: CheckEtcdMemberSkew, Component: nodestate.Etcd, Unsupported: true, Message: fmt.Sprintf(
		"etcd member %s runs below %s: moving this member to %s would leave it two minors behind, which etcd does not support, and this cannot be ignored; upgrade it to %s first",
		strings.Join(below, ", "), from, next, from)}}, nil
}

// apiServerSkew is the APIServerSkew check of a move from st to to: a
// kube-apiserver minor move needs every other node's kube-apiserver, by
// its record in the cluster, within one minor of to's. A node whose record
// holds no version (it predates them) is not checked, and is logged.
func (e *Engine) apiServerSkew(ctx context.Context, st, to *nodestate.NodeState) ([]versions.Finding, error) {
	fv, ok1 := kubeAPIServer(st)
	tv, ok2 := kubeAPIServer(to)
	if !ok1 || !ok2 || versions.MinorOf(fv) == versions.MinorOf(tv) {
		return nil, nil
	}
	v, err := e.hold.View(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: kube-apiserver %s -> %s waits: the other nodes' records cannot be read (%v); nothing was written, run it again once etcd answers", ErrInterrupted, versions.MinorOf(fv), versions.MinorOf(tv), err)
	}
	var out []versions.Finding
	var unread []string
	for _, p := range v.Nodes {
		if p.Node == st.NodeName {
			continue
		}
		recorded := p.APIServers()
		if len(recorded) == 0 {
			unread = append(unread, p.Node)
		}
		for _, s := range recorded {
			ov, err := version.ParseGeneric(s)
			if err != nil || minorGap(ov, tv) <= 1 {
				continue
			}
			out = append(out, versions.Finding{Check: CheckAPIServerSkew, Component: nodestate.KubeAPIServer, Unsupported: true, Message: fmt.Sprintf(
				"kube-apiserver on node %s is %s (its transaction %s): moving this node's to v%s would put them %d minors apart; the version skew policy allows one, and this cannot be ignored; move node %s to %s first",
				p.Node, s, p.Txn, tv, minorGap(ov, tv), p.Node, towards(ov, tv))})
		}
	}
	if len(unread) > 0 {
		e.log.Warn("kube-apiserver skew not checked against nodes whose record in the cluster holds no kube-apiserver version", "nodes", unread)
	}
	return out, nil
}

func kubeAPIServer(st *nodestate.NodeState) (*version.Version, bool) {
	if st == nil || st.Image(nodestate.KubeAPIServer) == "" {
		return nil, false
	}
	v, err := st.ComponentVersion(nodestate.KubeAPIServer)
	return v, err == nil && v != nil
}

// minorGap is how many minors a and b are apart (a major apart counts as
// more than one).
func minorGap(a, b *version.Version) int {
	if a.Major() != b.Major() {
		return 2
	}
	d := int(a.Minor()) - int(b.Minor())
	return max(d, -d)
}

// towards is the minor next to to on ov's side: where ov must be first.
func towards(ov, to *version.Version) string {
	if ov.LessThan(to) {
		return fmt.Sprintf("%d.%d", to.Major(), to.Minor()-1)
	}
	return fmt.Sprintf("%d.%d", to.Major(), to.Minor()+1)
}
