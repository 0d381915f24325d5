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

// quorumFresh is how old a quorum check may be when the gate lets the
// member be stopped: a gate that waited longer, or waited at all (a
// downgrade, a leader move), checks the quorum again right before the
// stop, so no stop rests on a check a member's loss has outdated.
const quorumFresh = time.Second

// gateBefore runs before an etcd step stops the member, and refuses the
// stop when it would cost the cluster its quorum. A fresh step calls it
// before its mark is journaled, so a refusal fails the step with etcd never
// written; a resumed one calls it through resumeGate. The cases:
//
//	rolling back                 rollbackGate (single member: nothing)
//	single member (no hold)      downgradeBeforeStep only
//	no etcd process runs         downgradeBeforeStep only: nothing to stop
//	otherwise                    quorum, downgradeBeforeStep, leader moved
//	                             off, quorum again when it waited (checkAgain)
//
// The downgrade comes after the first quorum check, so a refusal leaves no
// downgrade enabled; any failure after an enable cancels it
// (cancelDowngradeOnFail). See docs/ha.md#what-guards-each-etcd-stop.
func (e *Engine) gateBefore(ctx context.Context, r *run, p journal.Phase, comp string) (err error) {
	defer func() { err = e.cancelDowngradeOnFail(ctx, r, p, err) }()
	if comp != nodestate.Etcd {
		return nil
	}
	if p == journal.PhaseRollingBack {
		if e.hold == nil {
			return nil
		}
		return e.rollbackGate(ctx, r)
	}
	if e.hold == nil {
		return e.downgradeBeforeStep(ctx, r, p, comp)
	}
	if !e.etcdRuns(r) {
		e.log.Info("no etcd process runs: nothing to stop, no quorum gate", "txn", r.txn.ID)
		return e.downgradeBeforeStep(ctx, r, p, comp)
	}
	self := r.from.Etcd.MemberName
	e.event(r.txn.ID, p, "etcd-gate", comp, "etcd's members", "checking that every etcd member is healthy and the cluster keeps quorum without "+self)
	checked := time.Now()
	h, err := cluster.CheckQuorum(ctx, e.hold.Client(), self)
	if err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	if err := e.downgradeBeforeStep(ctx, r, p, comp); err != nil {
		return err
	}
	if from, to, moves := etcdMinors(r); moves && !cluster.MinorAtLeast(from+".0", to) {
		if last, _ := h.OthersOnMinor(to); last {
			e.event(r.txn.ID, p, "etcd-point-of-no-return", comp, "", fmt.Sprintf(
				"point of no return: %s is the last etcd member to run %s; going back to %s after this takes etcd's downgrade (see %s)", self, to, from, docGoingBack))
		}
	}
	if h.Leader == h.Self {
		e.event(r.txn.ID, p, "etcd-leader", comp, "another etcd leader", "moving etcd's leadership off "+self)
	}
	if err := cluster.MoveLeaderOff(ctx, e.hold.Client(), self, leaderMoveTimeout); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	if checkAgain(checked, etcdDownTo(r.from, r.to) != "" || h.Leader == h.Self) {
		e.event(r.txn.ID, p, "etcd-gate-again", comp, "etcd's members", "checking the quorum again right before stopping "+self)
		if _, err := cluster.CheckQuorum(ctx, e.hold.Client(), self); err != nil {
			return fmt.Errorf("%s: %w", comp, err)
		}
	}
	return nil
}

// checkAgain reports whether the quorum must be checked again before the
// stop: the gate waited (a downgrade, a leader move) or its check, counted
// from when it began, is older than quorumFresh.
func checkAgain(checked time.Time, waited bool) bool {
	return waited || time.Since(checked) > quorumFresh
}

// errGatePaused marks a resumed etcd step whose gate refused: its mark is
// journaled, so a rollback would restart the member all the same, which
// is the stop the gate just refused. The transaction stays open instead
// (exit 6), etcd untouched, until resume finds the cluster healthy.
var errGatePaused = errors.New("the resumed etcd step waits for the quorum gate")

// resumeGate is gateBefore for a step resumed from its journaled mark.
func (e *Engine) resumeGate(ctx context.Context, r *run, p journal.Phase, comp string) error {
	if p == journal.PhaseRollingBack {
		return e.gateBefore(ctx, r, p, comp) // pauses the rollback itself
	}
	if err := e.gateBefore(ctx, r, p, comp); err != nil {
		return fmt.Errorf("%w: etcd was not stopped: %w; make every etcd member healthy, then run `stratum-upgrade resume`", errGatePaused, err)
	}
	return nil
}

// rollbackGate is gateBefore for a rollback's stop of etcd (to write the
// old one back): a member that votes passes the quorum gate like any other
// stop. A refusal pauses the rollback (errResumable, exit 6) with the new
// etcd left running. A member that casts no vote (no etcd process runs, or
// its own status fails or names no leader) skips the gate: putting the old
// etcd back is the way out. A single member's restore is not gated.
func (e *Engine) rollbackGate(ctx context.Context, r *run) error {
	if !e.etcdRuns(r) {
		e.log.Info("no etcd process runs: the rollback stops nothing, no quorum gate", "txn", r.txn.ID)
		return nil
	}
	self := r.from.Etcd.MemberName
	p, comp := journal.PhaseRollingBack, nodestate.Etcd
	pause := func(err error) error {
		return fmt.Errorf("%w: the rollback waits for the etcd quorum gate to stop %s: %w; etcd left running: make every member healthy, then run `stratum-upgrade resume`", errResumable, self, err)
	}
	e.event(r.txn.ID, p, "etcd-gate", comp, "etcd's members", "checking that every etcd member is healthy and the cluster keeps quorum without "+self)
	checked := time.Now()
	h, skip, err := e.rollbackQuorum(ctx, r, self)
	if skip {
		return nil
	} else if err != nil {
		return pause(err)
	}
	if h.Leader == h.Self {
		e.event(r.txn.ID, p, "etcd-leader", comp, "another etcd leader", "moving etcd's leadership off "+self)
	}
	if err := cluster.MoveLeaderOff(ctx, e.hold.Client(), self, leaderMoveTimeout); err != nil {
		return pause(err)
	}
	if checkAgain(checked, h.Leader == h.Self) {
		e.event(r.txn.ID, p, "etcd-gate-again", comp, "etcd's members", "checking the quorum again right before stopping "+self)
		if _, _, err := e.rollbackQuorum(ctx, r, self); err != nil {
			return pause(err)
		}
	}
	return nil
}

// rollbackQuorum is CheckQuorum for the rollback's stop, and whether the
// gate is skipped: this member's own status request failed or it knows no
// leader, so its stop takes no vote away. One that answers with an alarm
// raised votes: it is not skipped.
func (e *Engine) rollbackQuorum(ctx context.Context, r *run, self string) (*cluster.Health, bool, error) {
	h, err := cluster.CheckQuorum(ctx, e.hold.Client(), self)
	if err == nil {
		return h, false, nil
	}
	if m := selfHealth(h); m != nil && !m.Votes() {
		e.log.Info("quorum gate skipped: this etcd member casts no vote (no answer or no leader)", "txn", r.txn.ID, "member", self, "why", m.Err)
		return h, true, nil
	}
	return h, false, err
}

// etcdRuns reports whether a process of etcd (the old or the new one)
// runs on this node; when /proc cannot be read, it may. A node state that
// has etcd stopped (a start's from, a stop's to) has no target for it: the
// other one names its binary.
func (e *Engine) etcdRuns(r *run) bool {
	asked := false
	for _, st := range []*nodestate.NodeState{r.from, r.to} {
		t, err := manifest.Target(st, nodestate.Etcd)
		if err != nil {
			continue
		}
		asked = true
		if ps, err := e.procs.Of(t); err != nil || len(ps) > 0 {
			return true
		}
	}
	return !asked
}

// selfHealth is this member's entry of h, nil when h is nil or does not
// list it.
func selfHealth(h *cluster.Health) *cluster.MemberHealth {
	if h == nil || h.Self == 0 {
		return nil
	}
	for i := range h.Members {
		if h.Members[i].ID == h.Self {
			return &h.Members[i]
		}
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
	e.event(r.txn.ID, p, "etcd-caught-up", comp, self+" to catch up with the leader", fmt.Sprintf("waiting until %s rejoins, within %d raft entries of the leader", self, maxRaftLag))
	if err := cluster.WaitCaughtUp(ctx, e.hold.Client(), self, maxRaftLag, e.dl.Active); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	return nil
}

// etcdMinors is etcd's minor before and after r ("3.6", "3.7"), and whether
// the transaction moves it.
func etcdMinors(r *run) (from, to string, moves bool) {
	from0, to0 := r.resolved()
	a, errA := from0.Version(nodestate.Etcd)
	b, errB := to0.Version(nodestate.Etcd)
	if errA != nil || errB != nil || a == nil || b == nil {
		return "", "", false
	}
	from, to = versions.MinorOf(a), versions.MinorOf(b)
	return from, to, from != to
}

// etcdDownTo is the etcd minor ("3.6") a transaction from st to to moves
// etcd down to, "" when it does not move it down (or to is nil).
func etcdDownTo(st, to *nodestate.NodeState) string {
	if to == nil {
		return ""
	}
	from, down, moves := etcdMinors(&run{from: st, to: to})
	if !moves || cluster.MinorAtLeast(down+".0", from) {
		return ""
	}
	return down
}

// docGoingBack is the docs section on taking a member back once its
// cluster version moved; messages cite it for the long story.
const docGoingBack = "docs/ha.md#going-back-after-the-cluster-version-moved"

// ErrEtcdPointOfNoReturn: a rollback would put an etcd of the old minor
// back on a member whose cluster moved (or is moving) to the new one, where
// it cannot start.
var ErrEtcdPointOfNoReturn = errors.New("etcd cannot be rolled back past its cluster version")
