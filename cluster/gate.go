package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// docQuorumGate is the docs section on the gate, for the long story a
// refusal's one line leaves out.
const docQuorumGate = "docs/ha.md#the-quorum-gate-around-a-nodes-etcd-step"

// ErrGate is matched (errors.Is) by every *GateError: the gate refused.
var ErrGate = errors.New("cluster: etcd gate refused")

// ErrSingleMember is matched (errors.Is) by the *GateError CheckQuorum
// returns for a one-member cluster: there is no quorum to keep and no other
// member to lead, so whether stopping that member is acceptable is the
// caller's decision (a single-node control plane stops its etcd anyway).
var ErrSingleMember = errors.New("cluster: etcd has a single member")

// The Check of a GateError: which condition failed. CheckQuorumSize: the
// cluster cannot lose a member and keep its quorum.
const (
	CheckMemberList = "member-list"
	CheckSelf       = "self"
	CheckSingle     = "single-member"
	CheckQuorumSize = "quorum"
	CheckStarted    = "started"
	CheckHealthy    = "healthy"
	CheckAlarm      = "alarm"
	CheckLeader     = "leader"
	CheckMoveLeader = "move-leader"
	CheckCaughtUp   = "caught-up"
)

const (
	// StatusTimeout bounds each status request to one member: a member
	// that does not answer within it (stopped, cut off) is not healthy.
	StatusTimeout = 5 * time.Second
	// pollInterval is how often MoveLeaderOff and WaitCaughtUp look again.
	pollInterval = 200 * time.Millisecond
)

// GateError is a refusal of the gate: Check is the condition that failed,
// Member the member it concerns ("" when none), Reason what was seen and
// what to do. Err, when set, is the underlying error.
type GateError struct {
	Check, Member, Reason string
	Err                   error
}

func (e *GateError) Error() string {
	s := "etcd gate (" + e.Check + "): "
	if e.Member != "" {
		s += "member " + e.Member + ": "
	}
	if s += e.Reason; e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches ErrGate, and ErrSingleMember for the single-member refusal.
func (e *GateError) Is(target error) bool {
	return target == ErrGate || (target == ErrSingleMember && e.Check == CheckSingle)
}

func (e *GateError) Unwrap() error { return e.Err }

// Health is what the gate saw: every member, its status, the leader.
// Leader is the leader's member id (0: none known); Self is this node's
// member id (0: not in the list).
type Health struct {
	Members []MemberHealth
	Leader  uint64
	Self    uint64
}

// MemberHealth is one member as the gate saw it. Started: it has joined
// (it has a name and client URLs). Answered: its status request, sent to
// its own client URL, came back from it: it runs and, with Leader set,
// votes. Alarms are the alarms raised on it (etcd's alarm store is
// replicated, so every member's status lists every member's alarms: they
// are sorted out by member here, and an alarm on one member is no error of
// another). Healthy: it answered with no errors, a known leader and no
// alarm raised on it. Err says why it is not healthy.
type MemberHealth struct {
	ID               uint64
	Name             string
	ClientURLs       []string
	Started, Healthy bool
	Answered         bool
	// Leader is the leader it names, 0 when it knows none (or did not
	// answer).
	Leader uint64
	// Alarms are the alarms raised on this member ("NOSPACE", "CORRUPT").
	Alarms    []string
	RaftIndex uint64
	Version   string
	// StorageVersion is the member's storage version (etcd 3.6+; "" from
	// 3.5 or when it did not answer).
	StorageVersion string
	// Downgrading is the minor ("3.6.0") the member reports the cluster
	// downgrading to, "" when no downgrade is enabled.
	Downgrading string
	Err         string
}

// Votes reports whether the member answered and knows a leader: it is one
// of the quorum's votes, alarm or not, so stopping it takes one away.
func (m MemberHealth) Votes() bool { return m.Answered && m.Leader != 0 }

// member is the entry of h for id, nil when there is none.
func (h *Health) member(id uint64) *MemberHealth {
	if i := slices.IndexFunc(h.Members, func(m MemberHealth) bool { return m.ID == id }); i >= 0 {
		return &h.Members[i]
	}
	return nil
}

// keepsQuorum: n voting members, down of them gone, still have n/2+1.
func keepsQuorum(n, down int) bool { return n-down >= n/2+1 }

// CheckQuorum refuses (a *GateError, errors.Is ErrGate) unless stopping the
// member named self is safe: self is in the member list; the cluster has
// more than one member (one member: ErrSingleMember, the caller decides);
// the cluster keeps quorum without self (a two-member cluster never does);
// every member is started, a voting member, and answers its status at its
// own client URL within StatusTimeout with no errors and the leader every
// other member names; no member has an alarm raised (CheckAlarm names the
// alarm and the member, after any member that does not vote). It changes nothing. The Health is
// returned whenever the member list was read, refusal or not.
func CheckQuorum(ctx context.Context, cli *clientv3.Client, self string) (*Health, error) {
	h, err := observe(ctx, cli, self)
	if err != nil {
		return nil, err
	}
	if h.Self == 0 {
		return h, selfUnknown(h, self)
	}
	n := len(h.Members)
	if n == 1 {
		return h, &GateError{Check: CheckSingle, Member: self, Reason: "is the only etcd member: stopping it stops etcd; there is no quorum to keep"}
	}
	if !keepsQuorum(n, 1) {
		return h, &GateError{Check: CheckQuorumSize, Member: self, Reason: fmt.Sprintf(
			"the cluster has %d members and needs %d for quorum, so it loses quorum while this member is down; grow it to 3 or 5 first", n, n/2+1)}
	}
	down := 0
	for _, m := range h.Members {
		if !m.Votes() {
			down++
		}
	}
	for _, m := range h.Members {
		left := fmt.Sprintf("with it down, stopping %s would leave %d of %d members (quorum %d)", self, n-down-1, n, n/2+1)
		if keepsQuorum(n, down+1) {
			left = "every member must be healthy before one is stopped"
		}
		switch {
		case !m.Started:
			return h, &GateError{Check: CheckStarted, Member: memberName(m), Reason: "is in the member list but never started; start it or remove it, then retry; " + left}
		case !m.Healthy && len(m.Alarms) == 0:
			return h, &GateError{Check: CheckHealthy, Member: m.Name, Reason: fmt.Sprintf("is not healthy (%s); bring it back, then retry; %s", m.Err, left)}
		}
	}
	for _, m := range h.Members {
		if len(m.Alarms) > 0 {
			return h, &GateError{Check: CheckAlarm, Member: m.Name, Reason: fmt.Sprintf(
				"has etcd alarm %s raised; clear its cause, run etcdctl alarm disarm, then retry (see %s)", strings.Join(m.Alarms, ", "), docQuorumGate)}
		}
	}
	if h.Leader == 0 {
		return h, &GateError{Check: CheckLeader, Reason: "the members do not agree on one leader (an election?); retry when the cluster is stable"}
	}
	return h, nil
}

// MoveLeaderOff makes sure the member named self does not lead: when it
// leads, it asks it (MoveLeader sent to its own client URL, the only member
// that accepts it) to hand leadership to the healthy member with the
// highest raft index, then waits until the members name a leader other
// than self, at most timeout. When self does not lead it returns nil at
// once. Self unknown, no agreed leader, no healthy transferee, a refused
// transfer or the deadline are a *GateError saying what it saw.
func MoveLeaderOff(ctx context.Context, cli *clientv3.Client, self string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h, err := observe(ctx, cli, self)
	if err != nil {
		return err
	}
	if h.Self == 0 {
		return selfUnknown(h, self)
	}
	if h.Leader == 0 {
		return &GateError{Check: CheckLeader, Member: self, Reason: "cannot tell whether it leads, no leader all members agree on: " + describe(h)}
	} else if h.Leader != h.Self {
		return nil
	}
	var to *MemberHealth
	for i, m := range h.Members {
		if m.ID != h.Self && m.Healthy && (to == nil || m.RaftIndex > to.RaftIndex) {
			to = &h.Members[i]
		}
	}
	if to == nil {
		return &GateError{Check: CheckMoveLeader, Member: self, Reason: "leads and no other member is healthy to take over: " + describe(h)}
	}
	if err := moveLeader(ctx, cli, h.member(h.Self).ClientURLs, to.ID); err != nil {
		return &GateError{Check: CheckMoveLeader, Member: self, Reason: fmt.Sprintf("leadership transfer to %s refused", to.Name), Err: err}
	}
	for {
		if h, err = observe(ctx, cli, self); err == nil && h.Leader != 0 && h.Leader != h.Self {
			return nil
		}
		select {
		case <-ctx.Done():
			return &GateError{Check: CheckMoveLeader, Member: self, Reason: fmt.Sprintf(
				"waited %s for the members to name a leader other than %s; last saw: %s", timeout, self, describe(h))}
		case <-time.After(pollInterval):
		}
	}
}

// moveLeader sends MoveLeader to the leader itself, at each of its URLs.
func moveLeader(ctx context.Context, cli *clientv3.Client, urls []string, to uint64) error {
	err := errors.New("the leader has no client URL")
	for _, u := range urls {
		conn, derr := cli.Dial(u)
		if derr != nil {
			err = fmt.Errorf("dial %s: %w", u, derr)
			continue
		}
		_, err = clientv3.NewMaintenanceFromMaintenanceClient(etcdserverpb.NewMaintenanceClient(conn), cli).MoveLeader(ctx, to)
		conn.Close()
		if err == nil {
			return nil
		}
		err = fmt.Errorf("move leader at %s: %w", u, err)
	}
	return err
}

// WaitCaughtUp waits, at most timeout, until the member named self is in
// the member list, started, answers its status with a known leader (an
// alarm does not keep it from catching up), and is at most maxLag raft
// entries behind the leader. It changes nothing. On the deadline (or ctx's
// end) the *GateError says what it waited for and what it last saw.
func WaitCaughtUp(ctx context.Context, cli *clientv3.Client, self string, maxLag uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "nothing yet"
	for {
		if h, err := observe(ctx, cli, self); err != nil {
			last = err.Error()
		} else if ok, what := caughtUp(h, self, maxLag); ok {
			return nil
		} else {
			last = what
		}
		select {
		case <-ctx.Done():
			return &GateError{Check: CheckCaughtUp, Member: self, Reason: fmt.Sprintf(
				"waited %s for it to rejoin and be within %d raft entries of the leader; last saw: %s",
				timeout, maxLag, last)}
		case <-time.After(pollInterval):
		}
	}
}

// caughtUp is WaitCaughtUp's condition on one observation, and what was
// seen when it does not hold.
func caughtUp(h *Health, self string, maxLag uint64) (bool, string) {
	me := h.member(h.Self)
	switch {
	case me == nil:
		return false, "not in the member list (members: " + names(h) + ")"
	case !me.Votes():
		return false, self + " " + me.Err
	case h.Leader == 0:
		return false, "no leader all members agree on: " + describe(h)
	}
	lead := h.member(h.Leader)
	if lead.RaftIndex > me.RaftIndex && lead.RaftIndex-me.RaftIndex > maxLag {
		return false, fmt.Sprintf("raft index %d, leader %s at %d (lag %d > %d)", me.RaftIndex, lead.Name, lead.RaftIndex, lead.RaftIndex-me.RaftIndex, maxLag)
	}
	return true, ""
}

func selfUnknown(h *Health, self string) *GateError { // the CheckSelf refusal
	return &GateError{Check: CheckSelf, Member: self, Reason: "not in the etcd member list (members: " + names(h) + "); check the node's etcd member name"}
}

// names lists the members' names (ids for members not started), sorted.
func names(h *Health) string {
	var out []string
	for _, m := range h.Members {
		out = append(out, memberName(m))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func memberName(m MemberHealth) string {
	if m.Name == "" {
		return fmt.Sprintf("%016x", m.ID)
	}
	return m.Name
}

// describe is one line per observation: each member's state and the leader.
func describe(h *Health) string {
	if h == nil {
		return "member list unreadable"
	}
	var out []string
	for _, m := range h.Members {
		s := memberName(m) + " " + m.Err
		if m.Healthy {
			s = fmt.Sprintf("%s healthy raft index %d", memberName(m), m.RaftIndex)
		}
		if m.ID == h.Leader {
			s += " (leader)"
		}
		out = append(out, s)
	}
	if h.Leader == 0 {
		out = append(out, "no agreed leader")
	}
	return strings.Join(out, "; ")
}
