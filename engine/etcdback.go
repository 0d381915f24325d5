package engine

// Whether a rollback may write the old etcd back on a member of a
// multi-member cluster whose etcd minor the transaction moved.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// errNoCluster: the rollback holds no connection to its cluster.
var errNoCluster = errors.New("no connection to the etcd cluster")

// readVersions is every member's status and the cluster version, through
// the rollout lock's client (or the test seam).
func (e *Engine) readVersions(ctx context.Context, st *nodestate.NodeState) (*cluster.Versions, error) {
	if e.etcdVersions != nil {
		return e.etcdVersions(ctx, st)
	}
	if e.hold == nil {
		return nil, errNoCluster
	}
	tlsCfg, err := etcddata.Endpoint(st).TLS()
	if err != nil {
		return nil, err
	}
	return cluster.ReadVersions(ctx, e.hold.Client(), tlsCfg, st.Etcd.MemberName)
}

// memberEtcdDecision decides how the old etcd goes back on a member of a
// multi-member cluster (its data is kept: the other members hold it), and
// says why. Once the cluster version moved to a newer minor, which happens
// within seconds of every member running it, an old etcd cannot start.
// In order:
//
//	no newer minor                       keep
//	cluster version moved                downgradeOrRefuse
//	new etcd never ran (stale)           keep
//	none runs unseen, or never answered  keep if the version did not move
//	ran; every other member on the new   downgradeOrRefuse
//	ran; a member on an older minor      keep: it holds the version back
//
// Past the stale row, anything unread (the cluster version, a member's,
// this member in the list) pauses the rollback (errResumable): unknown is
// never "old".
func (e *Engine) memberEtcdDecision(ctx context.Context, r *run) (string, string, error) {
	from, to, moves := etcdMinors(r)
	if !moves || cluster.MinorAtLeast(from+".0", to) {
		// Only a newer minor can move the cluster version past the old
		// etcd.
		return journal.EtcdKeep, "the other members hold it, and the transaction does not move etcd to a newer minor", nil
	}
	self := r.from.Etcd.MemberName
	ran, ranWhy := e.newerEtcdRan(ctx, r)
	v, err := e.readVersions(ctx, r.from)
	cv := ""
	if err == nil {
		cv = v.Cluster()
	}
	keep := func(why string, err error) (string, string, error) {
		if err != nil {
			return "", "", err
		}
		return journal.EtcdKeep, why, nil
	}
	if cv != "" && cluster.MinorAtLeast(cv, to) {
		return e.downgradeOrRefuse(ctx, r, fmt.Sprintf("the cluster version is %s", cv))
	}
	ranSays := "ran"
	switch ran {
	case etcdRanNoneRuns:
		ranSays = "may have run unseen"
	case etcdRanSilent:
		ranSays = "never answered"
	}
	pause := func(what string) error {
		return fmt.Errorf("%w: waiting for %s: this member's etcd %s %s (%s); nothing stopped or restored: run `stratum-upgrade resume` once it answers (see %s)", errResumable, what, to, ranSays, ranWhy, docGoingBack)
	}
	unread := func() error {
		switch {
		case err != nil:
			return pause(fmt.Sprintf("etcd's member list (%v)", err))
		case cv == "":
			return pause("etcd's cluster version (no member answered its /version)")
		}
		return nil
	}
	switch ran {
	case etcdRanStale:
		// The old etcd's processes still run: no newer one ran here.
		return keep(fmt.Sprintf("the other members hold it; this member's etcd %s never ran (%s), so the cluster version cannot have moved to %s through it: the old etcd goes back", to, ranWhy, to), nil)
	case etcdRanNoneRuns:
		// A newer etcd may have run and exited unseen (killed after the
		// write, then a reboot): only the cluster version can say it did
		// not move.
		return keep(fmt.Sprintf("the other members hold it; this member's etcd %s never ran (%s) and the cluster version is %s, so it did not move to %s: the old etcd goes back", to, ranWhy, cv, to), unread())
	case etcdRanSilent:
		// It started but never answered: the cluster version, read
		// now, says whether its peers saw it long enough to move.
		return keep(fmt.Sprintf("the other members hold it; %s, and the cluster version is %s, so it did not move to %s: the old etcd goes back", ranWhy, cv, to), unread())
	}
	if err := unread(); err != nil {
		return "", "", err
	}
	var unknown, behind []string
	selfID := uint64(0)
	if v.Health != nil {
		selfID = v.Health.Self
	}
	for _, m := range v.Members {
		switch {
		case m.ID == selfID:
		case m.Server == "":
			unknown = append(unknown, fmt.Sprintf("%s (%s)", memberLabel(m), m.Err))
		case !cluster.MinorAtLeast(m.Server, to):
			behind = append(behind, fmt.Sprintf("%s (%s)", memberLabel(m), m.Server))
		}
	}
	switch {
	case selfID == 0:
		return "", "", pause(fmt.Sprintf("%s to be in etcd's member list", self))
	case len(unknown) > 0:
		return "", "", pause(fmt.Sprintf("etcd member %s to answer its version; a member whose version is unknown is never taken for one on %s", strings.Join(unknown, ", "), from))
	case len(behind) == 0:
		return e.downgradeOrRefuse(ctx, r, fmt.Sprintf("every other etcd member runs %s and this member's etcd %s ran (%s), so the cluster version moves to %s (it is %s now)", to, to, ranWhy, to, cv))
	}
	return keep(fmt.Sprintf("the other members hold it; the cluster version is %s and %s run(s) an older minor, so it cannot move to %s: the old etcd goes back", cv, strings.Join(behind, ", "), to), nil)
}

// downgradeOrRefuse decides for a member whose cluster version moved to
// the new minor, or moves once this member answers (why says which): the
// downgrade protocol, run through this member's new etcd, is the only way
// back. When that etcd does not answer, the rollback is refused
// (ErrEtcdPointOfNoReturn), etcd left as it is.
func (e *Engine) downgradeOrRefuse(ctx context.Context, r *run, why string) (string, string, error) {
	from, to, _ := etcdMinors(r)
	// Waited for, not probed once: a new etcd restarting now (its step
	// failing is a common cause of the rollback) may answer in a moment.
	if t, err := manifest.Target(r.to, nodestate.Etcd); err == nil && e.procs.WaitActive(ctx, t, e.dl.Active) == nil {
		return journal.EtcdDowngrade, fmt.Sprintf("%s: etcd's downgrade protocol sets the cluster back to %s through this member's etcd %s, every write kept; the other members follow with rollback --last", why, from, to), nil
	}
	return "", "", fmt.Errorf("%w: %s, and this member's etcd %s does not answer, so etcd's downgrade protocol cannot run; nothing restored: make it answer and run the release again (see %s)", ErrEtcdPointOfNoReturn, why, to, docGoingBack)
}

// memberLabel names a member; one that never started has no name yet.
func memberLabel(m cluster.MemberVersion) string {
	if m.Name == "" {
		return fmt.Sprintf("%x", m.ID)
	}
	return m.Name
}
