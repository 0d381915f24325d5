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
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// CheckEtcdMemberSkew is the check that an upward etcd minor move leaves
// no member more than one minor behind: every member must report, in its
// status, at least this member's source minor. etcd does not support
// members two minors apart (and 3.7 cannot replay the v2 entries 3.5
// writes). A member whose version cannot be read refuses too, but that
// refusal may be ignored: it is unknown, not known to be unsupported.
const CheckEtcdMemberSkew = "EtcdMemberSkew"

// CheckAPIServerSkew is the check that a kube-apiserver minor move leaves
// every other control-plane node's kube-apiserver, as the API server
// reports it or else as its last transaction in the cluster records it,
// within one minor of this node's (the version skew policy for an HA
// control plane).
const CheckAPIServerSkew = "APIServerSkew"

// LiveAPIServer is one control-plane node's kube-apiserver as the
// cluster's API server reports it now (Config.APIServers).
type LiveAPIServer struct {
	// Node is its Node's name; Address its InternalIP ("" when none).
	Node, Address string
	// Versions are the kube-apiserver versions it runs or is about to
	// ("v1.35.4"); none when they could not be read, and Unread says why.
	Versions []string
	Unread   string
}

// ErrAPIServerUnanswered is Config.APIServers's error when the API server
// does not answer: the skew check then pauses, as for etcd.
var ErrAPIServerUnanswered = errors.New("the API server did not answer")

// clusterSkew runs both checks for b's plan while this node holds the
// rollout lock (nothing to check without it: a single member). Their
// failures are outside what etcd and Kubernetes support, so none is let
// through, but for a kube-apiserver version not known; a source that does
// not answer pauses (ErrInterrupted).
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
	finish, err := e.finishSkew(ctx, b.plan.From, b.plan.To)
	if err != nil {
		return err
	}
	_, err = preflight{ignore: b.ignore, subject: b.subject}.settle(slices.Concat(etcd, api, finish))
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
	var out []versions.Finding
	if len(below) > 0 {
		out = append(out, versions.Finding{Check: CheckEtcdMemberSkew, Component: nodestate.Etcd, Unsupported: true, Message: fmt.Sprintf(
			"etcd member %s runs below %s: moving this member to %s would leave it two minors behind, which etcd does not support, and this cannot be ignored; upgrade it to %s first",
			strings.Join(below, ", "), from, next, from)})
	}
	if len(unknown) > 0 {
		// Unknown is not known to be unsupported: refused, but an operator
		// who knows the member's version may let it through.
		out = append(out, versions.Finding{Check: CheckEtcdMemberSkew, Component: nodestate.Etcd, Message: fmt.Sprintf(
			"the etcd version of member %s cannot be read, and this member moves to %s only once every member runs %s or later: bring it back and run again",
			strings.Join(unknown, ", "), next, from)})
	}
	return out, nil
}

// apiServerSkew is the APIServerSkew check of a move from st to to: a
// kube-apiserver minor move needs every other control-plane node's
// kube-apiserver within one minor of to's. A node's version is the API
// server's (its mirror pod) first, its record in the cluster second; a
// node known from neither is refused, but that can be ignored (unknown is
// not unsupported). Without an API server, the records alone are checked.
func (e *Engine) apiServerSkew(ctx context.Context, st, to *nodestate.NodeState) ([]versions.Finding, error) {
	fv, ok1 := kubeAPIServer(st)
	tv, ok2 := kubeAPIServer(to)
	if !ok1 || !ok2 || versions.MinorOf(fv) == versions.MinorOf(tv) {
		return nil, nil
	}
	sk := skew{to: tv}
	err := e.peerAPIServers(ctx, st, fmt.Sprintf("kube-apiserver %s -> %s", versions.MinorOf(fv), versions.MinorOf(tv)), sk.check, sk.unknown)
	return sk.out, err
}

// peerAPIServers reads every other control-plane node's kube-apiserver
// versions for move (what waits on them, for the errors) and hands each
// node's to check with their source: the API server's (its mirror pod)
// first, its record in the cluster second (check reports whether any
// version was known). A node the API server lists and neither source
// knows goes to unknown, as does an API server that lists none; one only
// recorded and not known is warned of. A source that does not answer is
// ErrInterrupted: the move waits.
func (e *Engine) peerAPIServers(ctx context.Context, st *nodestate.NodeState, move string, check func(node string, vs []string, source string) bool, unknown func(what string)) error {
	v, err := e.hold.View(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s waits: the other nodes' records cannot be read (%v); nothing was written, run it again once etcd answers", ErrInterrupted, move, err)
	}
	var live []LiveAPIServer
	var liveErr error
	if e.apiServers != nil {
		live, liveErr = e.apiServers(ctx)
		if errors.Is(liveErr, ErrAPIServerUnanswered) {
			return fmt.Errorf("%w: %s waits: the control-plane nodes' kube-apiserver versions cannot be read (%v); nothing was written, run it again once the API server answers", ErrInterrupted, move, liveErr)
		}
	}
	records := map[string]cluster.Progress{}
	for _, p := range v.Nodes {
		records[p.Node] = p
	}
	seen := map[string]bool{st.NodeName: true}
	for _, a := range live {
		if a.Node == st.NodeName || (a.Address != "" && a.Address == st.AdvertiseAddress) {
			continue
		}
		seen[a.Node] = true
		p := records[a.Node]
		if !check(a.Node, a.Versions, "its mirror pod, by the API server") && !check(a.Node, p.APIServers(), "its transaction "+p.Txn) {
			unknown(fmt.Sprintf("the kube-apiserver version of control-plane node %s is not known (the API server: %s), and the cluster holds no record of its version", a.Node, a.Unread))
		}
	}
	var unread []string
	for _, p := range v.Nodes {
		if !seen[p.Node] && !check(p.Node, p.APIServers(), "its transaction "+p.Txn) {
			unread = append(unread, p.Node)
		}
	}
	switch {
	case e.apiServers == nil:
		e.log.Warn("kube-apiserver versions checked against the nodes' records in the cluster alone: there is no API server to read the control-plane nodes from", "move", move, "unchecked", unread)
	case liveErr != nil:
		unknown(fmt.Sprintf("the control-plane nodes cannot be read from the API server (%v), so a control-plane node with no record in the cluster is not known", liveErr))
	case len(unread) > 0:
		e.log.Warn("kube-apiserver versions not checked against nodes recorded in the cluster with no version, which the API server lists as no control-plane node", "move", move, "nodes", unread)
	}
	return nil
}

// skew collects the APIServerSkew findings of a move to to.
type skew struct {
	to  *version.Version
	out []versions.Finding
}

// check checks node's kube-apiserver versions vs, as source says them,
// and reports whether any was known.
func (k *skew) check(node string, vs []string, source string) bool {
	return eachVersion(vs, func(s string, ov *version.Version) {
		if gap := minorGap(ov, k.to); gap > 1 {
			k.out = append(k.out, versions.Finding{Check: CheckAPIServerSkew, Component: nodestate.KubeAPIServer, Unsupported: true, Message: fmt.Sprintf(
				"kube-apiserver on node %s is %s (%s): moving this node's to v%s would put them %d minors apart; the version skew policy allows one, and this cannot be ignored; move node %s to %s first",
				node, s, source, k.to, gap, node, towards(ov, k.to))})
		}
	})
}

// eachVersion calls f with each of vs that parses as a version (the
// versions peerAPIServers hands a check), and reports whether any did.
func eachVersion(vs []string, f func(s string, v *version.Version)) bool {
	known := false
	for _, s := range vs {
		v, err := version.ParseGeneric(s)
		if err != nil {
			continue
		}
		known = true
		f(s, v)
	}
	return known
}

// unknown is the finding that what could not be read may be out of skew:
// refused, but an operator who checked can let it through.
func (k *skew) unknown(what string) {
	lo := max(k.to.Minor(), 1) - 1
	k.out = append(k.out, versions.Finding{Check: CheckAPIServerSkew, Component: nodestate.KubeAPIServer, Message: fmt.Sprintf(
		"%s: moving this node's kube-apiserver to v%s needs it within one minor; check that it runs %d.%d to %d.%d, then let this through with --ignore-preflight-errors=%s",
		what, k.to, k.to.Major(), lo, k.to.Major(), k.to.Minor()+1, CheckAPIServerSkew)})
}

func kubeAPIServer(st *nodestate.NodeState) (*version.Version, bool) {
	if st == nil || resolve.Image(st, nodestate.KubeAPIServer) == "" {
		return nil, false
	}
	v, err := resolve.Version(st, nodestate.KubeAPIServer)
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
