package engine

// The quorum gate around this node's etcd step in a multi-member cluster
// (package cluster, gate.go): before the member is stopped, the cluster must
// keep quorum without it and its leadership is moved away; after the new
// member answers, it must have rejoined and caught up before the next
// component.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// maxRaftLag is how many raft entries behind the leader a replaced member
// may be and count as caught up: a member that rejoined applies a backlog
// of that size in well under a second.
const maxRaftLag = 1000

// leaderMoveTimeout bounds moving the leadership off this member.
const leaderMoveTimeout = 30 * time.Second

// gateBefore runs before an etcd step going forwards stops the member:
// a fresh step's before its mark is journaled (a refusal fails the step,
// and the transaction rolls back with etcd never written, so the rollback
// leaves the member alone), a resumed one's before it stops the member
// (resumeGate). Every such stop passes it: an upgrade's, a restart's and a
// stop's, first run and resume alike. A member with no etcd process
// running has nothing to stop (a start, or a resumed step whose stop had
// begun): it is not gated. A rollback's etcd step is not gated: putting
// the old member back is the way out.
func (e *Engine) gateBefore(ctx context.Context, r *run, p journal.Phase, comp string) error {
	if comp != nodestate.Etcd || e.hold == nil || p == journal.PhaseRollingBack {
		return nil
	}
	if t, err := manifest.Target(r.from, comp); err == nil {
		if ps, err := e.procs.PIDs(t.Binary); err == nil && len(ps) == 0 {
			e.log.Info("no etcd process runs: its step stops nothing, and the quorum gate is not needed", "txn", r.txn.ID)
			return nil
		}
	}
	self := r.from.Etcd.MemberName
	e.event(r.txn.ID, p, "etcd-gate", comp, "etcd's members", "checking that every etcd member is healthy and the cluster keeps quorum without "+self)
	h, err := cluster.CheckQuorum(ctx, e.hold.Client(), self)
	if err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	if from, to, moves := etcdMinors(r); moves {
		if last, _ := h.OthersOnMinor(to); last {
			e.event(r.txn.ID, p, "etcd-point-of-no-return", comp, "", fmt.Sprintf(
				"point of no return: every other etcd member runs %s; once %s does, the cluster version moves to %s and an etcd %s cannot start on this member's data, so a rollback after this step keeps etcd %s (docs/ha.md)", to, self, to, from, to))
		}
	}
	if h.Leader == h.Self {
		e.event(r.txn.ID, p, "etcd-leader", comp, "another etcd leader", "moving etcd's leadership off "+self)
	}
	if err := cluster.MoveLeaderOff(ctx, e.hold.Client(), self, leaderMoveTimeout); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	return nil
}

// errGatePaused marks a resumed etcd step whose gate refused: its mark is
// journaled, so a rollback would restart the member all the same, which
// is the stop the gate just refused. The transaction stays open instead
// (exit 6), etcd untouched, until resume finds the cluster healthy.
var errGatePaused = errors.New("the resumed etcd step waits for the quorum gate")

// resumeGate is gateBefore for a step resumed from its journaled mark.
func (e *Engine) resumeGate(ctx context.Context, r *run, p journal.Phase, comp string) error {
	if err := e.gateBefore(ctx, r, p, comp); err != nil {
		return fmt.Errorf("%w: etcd was not stopped: %w; make every etcd member healthy, then run `stratum-upgrade resume`", errGatePaused, err)
	}
	return nil
}

// gateAfter waits, once the new etcd member answers, until it has rejoined
// the cluster and caught up with the leader (bounded by Deadlines.Active).
func (e *Engine) gateAfter(ctx context.Context, r *run, p journal.Phase, st *nodestate.NodeState, comp string) error {
	if comp != nodestate.Etcd || e.hold == nil {
		return nil
	}
	self := st.Etcd.MemberName
	e.event(r.txn.ID, p, "etcd-caught-up", comp, self+" to catch up with the leader", fmt.Sprintf("waiting until %s has rejoined and is within %d raft entries of the leader", self, maxRaftLag))
	if err := cluster.WaitCaughtUp(ctx, e.hold.Client(), self, maxRaftLag, e.dl.Active); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	return nil
}

// etcdMinors is etcd's minor before and after r ("3.6", "3.7"), and whether
// the transaction moves it.
func etcdMinors(r *run) (from, to string, moves bool) {
	a, errA := r.from.ComponentVersion(nodestate.Etcd)
	b, errB := r.to.ComponentVersion(nodestate.Etcd)
	if errA != nil || errB != nil || a == nil || b == nil {
		return "", "", false
	}
	from, to = versions.MinorOf(a), versions.MinorOf(b)
	return from, to, from != to
}

// ErrEtcdPointOfNoReturn: a rollback would put an etcd of the old minor
// back on a member whose cluster moved (or is moving) to the new one, where
// it cannot start.
var ErrEtcdPointOfNoReturn = errors.New("etcd cannot be rolled back past its cluster version")

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
	if e.hold == nil || !slices.Contains(written, nodestate.Etcd) {
		return nil
	}
	from, to, moves := etcdMinors(r)
	if !moves {
		return nil
	}
	self := r.from.Etcd.MemberName
	h, err := cluster.Observe(ctx, e.hold.Client(), self)
	if err != nil {
		// Unknown is not "safe": the rollback pauses, and resume asks again.
		return fmt.Errorf("%w: %w: cannot tell whether the other etcd members run %s: %v; nothing was restored", errResumable, ErrEtcdPointOfNoReturn, to, err)
	}
	if last, _ := h.OthersOnMinor(to); !last {
		return nil
	}
	return fmt.Errorf("%w: every other etcd member runs %s, so with %s on %s too the cluster version is %s and etcd %s cannot start on this member's data; nothing was restored: fix the failing component and run the release again (etcd stays %s), or downgrade the cluster with etcd's downgrade protocol first (docs/ha.md)",
		ErrEtcdPointOfNoReturn, to, self, to, to, from, to)
}
