package cli

// What a transaction command tells the cluster's API server (package
// kubeapi): Events on the Node, the outcome annotations, and after a
// commit kubeadm's ClusterConfiguration. Nothing here changes a
// transaction or its exit code; a failure is a warning in the log.

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/kubeapi"
	"github.com/ciq/stratum-upgrade/nodestate"
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

// clusterView is the API server as one transaction command sees it.
type clusterView struct {
	g *globals
	// cs is nil without a kubeconfig: the node has no API server to tell.
	cs     kubeapi.API
	poster *kubeapi.Poster
}

// openCluster is the API server of the node state j holds, through
// --kubeconfig or <kubeconfigDir>/admin.conf. Nothing is sent yet.
func (g *globals) openCluster(j *journal.Journal) *clusterView {
	if g.api.noEvents && g.api.noKubeadmConfig {
		return &clusterView{g: g}
	}
	st, err := j.NodeState()
	if err != nil || st == nil {
		return &clusterView{g: g} // no node state yet (init): nothing to name the node by
	}
	return g.clusterOf(st)
}

// clusterOf is openCluster for the node state st.
func (g *globals) clusterOf(st *nodestate.NodeState) *clusterView {
	v := &clusterView{g: g}
	if g.api.noEvents && g.api.noKubeadmConfig {
		return v
	}
	path := g.api.kubeconfig
	if path == "" {
		path = filepath.Join(st.KubeconfigDir, "admin.conf")
	}
	cs, err := kubeapi.Connect(path)
	switch {
	case errors.Is(err, kubeapi.ErrNoKubeconfig) && g.api.kubeconfig == "":
		g.log.Info("no kubeconfig: the cluster's API server is not told of this command", "kubeconfig", path)
		return v
	case err != nil:
		g.log.Warn("the cluster's API server is not told of this command", "err", err)
		return v
	}
	v.cs = cs
	if !g.api.noEvents {
		v.poster = kubeapi.NewPoster(cs, kubeapi.NodeRef{Name: st.NodeName, Address: st.AdvertiseAddress}, g.log)
	}
	return v
}

// event posts the engine's events an operator looks for on the Node: a
// transaction's begin, each component replaced or restored, its end.
func (v *clusterView) event(ev engine.Event) {
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

// ended keeps the outcome in the Node's annotations and, after a commit
// that changed the versions, records the kubeadm-config update it owes
// (done by finish, or by a later command when the API server does not
// answer now). A commit that left them (a restart, an extra arg) owes
// nothing: on a node of a multi-member cluster not yet upgraded it would
// set the cluster's configuration back to this node's older versions.
func (v *clusterView) ended(end engine.End) {
	if v.poster != nil {
		release := ""
		if end.State != nil {
			release = end.State.KubernetesVersion
		}
		v.poster.Annotate(kubeapi.Outcome{Txn: end.Txn, Outcome: string(end.Outcome), Release: release})
	}
	if end.Outcome != engine.Committed || v.cs == nil || v.g.api.noKubeadmConfig || end.State == nil || end.From == nil {
		return
	}
	now := clusterVersions(end.State)
	if now == clusterVersions(end.From) {
		return
	}
	for _, comp := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		want, err := nodestate.KubeadmImage(now.ImageRepository, comp, now.KubernetesVersion)
		if img := end.State.Image(comp); err == nil && img != want {
			v.g.log.Warn("kubeadm-config cannot say this node's image: kubeadm would run another from its ClusterConfiguration", "component", comp, "image", img, "kubeadm", want)
		}
	}
	p := kubeapi.Pending{Txn: end.Txn, Versions: now, Recorded: time.Now()}
	if err := kubeapi.SavePending(v.g.stateDir, p); err != nil {
		v.g.log.Warn("the kubeadm-config update after this commit is not recorded; the transaction is unaffected", "txn", end.Txn, "err", err)
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
	ctx, cancel := context.WithTimeout(context.Background(), kubeadmConfigWait)
	defer cancel()
	done, ed, err := kubeapi.Sync(ctx, v.cs, v.g.stateDir)
	record := filepath.Join(v.g.stateDir, kubeapi.PendingFile)
	switch done {
	case kubeapi.Updated:
		v.g.log.Info("kubeadm-config's ClusterConfiguration holds the versions the node runs", "changed", ed.Changed)
	case kubeapi.Deferred:
		v.g.log.Warn("kubeadm-config not updated: the API server did not answer; the next command that reaches it does it", "record", record, "err", err)
	case kubeapi.Refused:
		v.g.log.Warn("kubeadm-config not updated; fix the cause, or turn the update off with --no-kubeadm-config", "record", record, "err", err)
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
		EtcdImage:         st.Image(nodestate.Etcd),
	}
}
