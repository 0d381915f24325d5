package cli

// What a transaction command tells the cluster's API server (package
// kubeapi): Events on the Node, the outcome annotations, and after a
// commit kubeadm's ClusterConfiguration. Nothing here changes a
// transaction or its exit code; a failure is a warning in the log.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/kubeapi"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// apiSettings are the flags of the cluster's API server.
type apiSettings struct {
	kubeconfig      string
	noEvents        bool
	noKubeadmConfig bool
}

// eventsWait is how long a command, its transaction over, gives the Events
// still queued; kubeadmConfigWait bounds the kubeadm-config update.
const (
	eventsWait        = 10 * time.Second
	kubeadmConfigWait = 15 * time.Second
)

// clusterView is the API server as one transaction command sees it: told
// of the transaction, and asked for the control-plane nodes' versions
// (the APIServerSkew pre-flight) and this node's kubelet's
// (StaticPodKubelet) whatever --no-events and
// --no-kubeadm-config say, which are about telling it.
type clusterView struct {
	g *globals
	// j is the journal the owed kubeadm-config update is derived from
	// (nil: none owed).
	j *journal.Journal
	// cs is nil without a kubeconfig: the node has no API server.
	cs kubeapi.API
	// node is this node's Node, by the node state's name and address.
	node   kubeapi.NodeRef
	poster *kubeapi.Poster
	// baseline makes the kubeadm-config mark when there is none, once, at
	// the transaction's first event: a command refused before its
	// transaction begins (a pre-flight refusal) writes nothing.
	baseline func()
}

// openCluster is the API server of the node state j holds, through
// --kubeconfig or <kubeconfigDir>/admin.conf. Nothing is sent yet.
// The kubeadm-config mark is made first when there is none, so that the
// commits before this command owe nothing and this command's owes the
// update whatever happens after it.
func (g *globals) openCluster(j *journal.Journal) *clusterView {
	baseline := func() {}
	if last, err := lastChange(j); err != nil {
		g.log.Warn("the kubeadm-config update owed is not known; the transaction is unaffected", "err", err)
	} else {
		baseline = sync.OnceFunc(func() {
			if err := kubeapi.Baseline(g.stateDir, last); err != nil {
				g.log.Warn("the kubeadm-config mark is not written; the transaction is unaffected", "err", err)
			}
		})
	}
	st, err := j.NodeState()
	if err != nil || st == nil {
		return &clusterView{g: g, j: j, baseline: baseline} // no node state yet (init): nothing to name the node by
	}
	v := g.clusterOf(st)
	v.j, v.baseline = j, baseline
	return v
}

// lastChange is the journal's last committed transaction that changed
// the versions kubeadm's ClusterConfiguration says (nil: none). A commit
// that left them (a restart, an extra arg) owes nothing: on a node of a
// multi-member cluster not yet upgraded it would set the cluster's
// configuration back to this node's older versions.
func lastChange(j *journal.Journal) (*kubeapi.Change, error) {
	if j == nil {
		return nil, nil
	}
	hist, err := j.History(0)
	if err != nil {
		return nil, err
	}
	for _, t := range hist {
		if t.Phase != journal.PhaseCommitted || len(t.From) == 0 || len(t.To) == 0 {
			continue
		}
		from, err := nodestate.Parse(t.From)
		if err != nil {
			return nil, fmt.Errorf("transaction %s: node state before: %w", t.ID, err)
		}
		to, err := nodestate.Parse(t.To)
		if err != nil {
			return nil, fmt.Errorf("transaction %s: node state after: %w", t.ID, err)
		}
		if now := clusterVersions(to); now != clusterVersions(from) {
			return &kubeapi.Change{Txn: t.ID, Versions: now}, nil
		}
	}
	return nil, nil
}

// clusterOf is openCluster for the node state st.
func (g *globals) clusterOf(st *nodestate.NodeState) *clusterView {
	v := &clusterView{g: g}
	path := g.api.kubeconfig
	if path == "" {
		path = filepath.Join(st.KubeconfigDir, "admin.conf")
	}
	cs, err := kubeapi.Connect(path)
	switch {
	case errors.Is(err, kubeapi.ErrNoKubeconfig) && g.api.kubeconfig == "":
		g.log.Info("no kubeconfig: the cluster's API server is neither told of this command nor asked for the control-plane nodes' and this node's kubelet's versions", "kubeconfig", path)
		return v
	case err != nil:
		g.log.Warn("the cluster's API server is neither told of this command nor asked for the control-plane nodes' and this node's kubelet's versions", "err", err)
		return v
	}
	v.cs, v.node = cs, kubeapi.NodeRef{Name: st.NodeName, Address: st.AdvertiseAddress}
	if !g.api.noEvents {
		v.poster = kubeapi.NewPoster(cs, v.node, g.log)
	}
	return v
}

// apiServers is the engine's live source of the control-plane nodes'
// kube-apiserver versions (engine.Config.APIServers): nil without an API
// server, which the engine then says.
func (v *clusterView) apiServers() func(context.Context) ([]engine.LiveAPIServer, error) {
	if v.cs == nil {
		return nil
	}
	return func(ctx context.Context) ([]engine.LiveAPIServer, error) {
		l, err := kubeapi.APIServers(ctx, v.cs)
		if errors.Is(err, kubeapi.ErrUnanswered) {
			return nil, unanswered{err}
		}
		if err != nil {
			return nil, err
		}
		out := make([]engine.LiveAPIServer, 0, len(l))
		for _, a := range l {
			out = append(out, engine.LiveAPIServer{Node: a.Node, Address: a.Address, Versions: a.Versions, Unread: a.Unread})
		}
		return out, nil
	}
}

// kubelet is the engine's live source of this node's running kubelet's
// version (engine.Config.Kubelet), its Node's, whatever --no-events says:
// nil without an API server, which the engine then says.
func (v *clusterView) kubelet() func(context.Context) (string, error) {
	if v.cs == nil {
		return nil
	}
	return func(ctx context.Context) (string, error) {
		return kubeapi.KubeletVersion(ctx, v.cs, v.node)
	}
}

// planKubelet is plan's source of this node's running kubelet's version
// (engine.UpgradeOptions.Kubelet), so that plan refuses what run and
// apply would: read once, through admin.conf in the node state's
// kubeconfigDir; nil without it (plan has no --kubeconfig).
func (g *globals) planKubelet(st *nodestate.NodeState) func(context.Context) (string, error) {
	cs, err := kubeapi.Connect(filepath.Join(st.KubeconfigDir, "admin.conf"))
	if err != nil {
		if !errors.Is(err, kubeapi.ErrNoKubeconfig) {
			g.log.Warn("static pods checked against the target's kubelet alone: the cluster's API server cannot be asked for this node's", "err", err)
		}
		return nil
	}
	read := sync.OnceValues(func() (string, error) {
		return kubeapi.KubeletVersion(context.Background(), cs, kubeapi.NodeRef{Name: st.NodeName, Address: st.AdvertiseAddress})
	})
	return func(context.Context) (string, error) { return read() }
}

// unanswered is kubeapi's ErrUnanswered as the engine's
// ErrAPIServerUnanswered, its message kubeapi's.
type unanswered struct{ error }

func (u unanswered) Is(target error) bool { return target == engine.ErrAPIServerUnanswered }
func (u unanswered) Unwrap() error        { return u.error }

// event posts the engine's events an operator looks for on the Node: a
// transaction's begin, each component replaced or restored, its end.
func (v *clusterView) event(ev engine.Event) {
	if ev.Txn != "" && v.baseline != nil {
		v.baseline()
	}
	if v.poster == nil {
		return
	}
	reason, warning := eventReason(ev)
	if reason == "" {
		return
	}
	v.poster.Post(kubeapi.Notice{Time: ev.Time, Txn: ev.Txn, Reason: reason, Message: ev.Message, Warning: warning})
}

// eventReason is the Event reason of ev ("" for a step not posted) and
// whether it is a warning.
func eventReason(ev engine.Event) (string, bool) {
	switch ev.Step {
	case "begin":
		return "TransactionBegan", false
	case "resume":
		return "TransactionResumed", false
	case "done":
		if ev.Phase == string(journal.PhaseRollingBack) {
			return "ComponentRestored", false
		}
		return "ComponentReplaced", false
	case "rollback":
		return "RollingBack", true
	case "commit":
		return "TransactionCommitted", false
	case "rolled-back":
		return "TransactionRolledBack", true
	case "rollback-failed":
		return "RollbackFailed", true
	}
	return "", false
}

// ended keeps the outcome in the Node's annotations. The kubeadm-config
// update a commit that changed the versions owes is the journal's to say
// (lastChange): finish, or a later command when the API server does not
// answer now or this one crashed, does it. With --no-kubeadm-config the
// commit is marked as owing nothing.
func (v *clusterView) ended(end engine.End) {
	if v.poster != nil {
		release := ""
		if end.State != nil {
			release = end.State.KubernetesVersion
		}
		v.poster.Annotate(kubeapi.Outcome{Txn: end.Txn, Outcome: string(end.Outcome), Release: release})
	}
	if end.Outcome != engine.Committed || end.State == nil || end.From == nil {
		return
	}
	now := clusterVersions(end.State)
	if now == clusterVersions(end.From) {
		return
	}
	if v.g.api.noKubeadmConfig {
		if err := kubeapi.SaveMark(v.g.stateDir, kubeapi.Mark{Change: kubeapi.Change{Txn: end.Txn, Versions: now}, At: time.Now()}); err != nil {
			v.g.log.Warn("kubeadm-config mark not written: a later command without --no-kubeadm-config updates kubeadm-config", "txn", end.Txn, "err", err)
		}
		return
	}
	if v.cs == nil {
		return
	}
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		want, err := resolve.KubeadmImage(now.ImageRepository, comp, now.KubernetesVersion)
		if img := resolve.Image(end.State, comp); err == nil && img != want {
			v.g.log.Warn("kubeadm-config cannot say this node's image: kubeadm would run another from its ClusterConfiguration", "component", comp, "image", img, "kubeadm", want)
		}
	}
}

// finish gives the queued Events their last chance and does the
// kubeadm-config update owed, this command's or an earlier one's.
func (v *clusterView) finish() {
	if v.poster != nil {
		if err := v.poster.Close(eventsWait); err != nil {
			v.g.log.Warn("Events not posted on the Node; the transaction is unaffected", "err", err)
		}
	}
	if v.cs == nil || v.g.api.noKubeadmConfig {
		return
	}
	last, err := lastChange(v.j)
	if err != nil {
		v.g.log.Warn("the kubeadm-config update owed is not known; the transaction is unaffected", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubeadmConfigWait)
	defer cancel()
	done, ed, err := kubeapi.Sync(ctx, v.cs, v.g.stateDir, last)
	switch done {
	case kubeapi.Updated:
		v.g.log.Info("kubeadm-config's ClusterConfiguration holds the versions the node runs", "txn", last.Txn, "changed", ed.Changed)
	case kubeapi.Deferred:
		v.g.log.Warn("kubeadm-config not updated: the API server did not answer; the next command that reaches it does it", "txn", last.Txn, "err", err)
	case kubeapi.Refused:
		v.g.log.Warn("kubeadm-config not updated; fix the cause, or turn the update off with --no-kubeadm-config", "txn", last.Txn, "err", err)
	default:
		if err != nil {
			v.g.log.Warn("kubeadm-config", "err", err)
		}
	}
	for _, n := range ed.Notes {
		v.g.log.Warn("kubeadm-config: " + n)
	}
}

// clusterVersions is what kubeadm's ClusterConfiguration says of st.
func clusterVersions(st *nodestate.NodeState) kubeapi.ClusterVersions {
	return kubeapi.ClusterVersions{
		KubernetesVersion: st.KubernetesVersion,
		ImageRepository:   st.Repository(),
		EtcdImage:         resolve.Image(st, nodestate.Etcd),
	}
}
