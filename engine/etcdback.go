package engine

// Whether a rollback may write the old etcd back on a member of a
// multi-member cluster whose etcd minor the transaction moved.

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
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

// checkEtcdRollback refuses a rollback that would swap etcd's binary back
// to an older minor on a member of a multi-member cluster whose other
// members all run the new minor: the cluster version moves to it within
// seconds of this member joining (it may have already), and then the old
// etcd cannot start on the data. The rollback then fails before anything
// is restored (rollback-failed: the node keeps what it runs, etcd included,
// and the rollout halts); an operator fixes the failing component and runs
// the release again, or downgrades etcd with its own downgrade protocol.
// While a member still runs the old minor the cluster version has not moved
// and the old binary goes back as in any rollback.
func (e *Engine) checkEtcdRollback(ctx context.Context, r *run, written []string) error {
	if (e.hold == nil && e.etcdVersions == nil) || !slices.Contains(written, nodestate.Etcd) {
		return nil
	}
	from, to, moves := etcdMinors(r)
	if !moves {
		return nil
	}
	self := r.from.Etcd.MemberName
	v, err := e.readVersions(ctx, r.from)
	if err != nil {
		// Unknown is not "safe": the rollback pauses, and resume asks again.
		return fmt.Errorf("%w: %w: cannot tell whether the other etcd members run %s: %v; nothing was restored", errResumable, ErrEtcdPointOfNoReturn, to, err)
	}
	if last, _ := v.OthersOnMinor(to); !last {
		return nil
	}
	return fmt.Errorf("%w: every other etcd member runs %s, so with %s on %s too the cluster version is %s and etcd %s cannot start on this member's data; nothing was restored: fix the failing component and run the release again (etcd stays %s), or downgrade the cluster with etcd's downgrade protocol first (docs/ha.md)",
		ErrEtcdPointOfNoReturn, to, self, to, to, from, to)
}
