package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// refusal asserts err is a *GateError of check about member and returns it.
func refusal(t *testing.T, err error, check, member string) *GateError {
	t.Helper()
	var ge *GateError
	if !errors.As(err, &ge) || !errors.Is(err, ErrGate) {
		t.Fatalf("err = %v, want a *GateError matching ErrGate", err)
	}
	if ge.Check != check || ge.Member != member {
		t.Fatalf("refusal %q about %q (%v), want %q about %q", ge.Check, ge.Member, err, check, member)
	}
	return ge
}

// leaderOf is the leader's id as the member at url reports it.
func leaderOf(t *testing.T, cli *clientv3.Client, url string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, url)
	if err != nil {
		t.Fatalf("status of %s: %v", url, err)
	}
	return st.Leader
}

// waitLeader waits, at most 30 s, until every one of members answers its
// status naming the same leader, one of them: after a member is killed or
// paused the others may first have to elect one.
func waitLeader(t *testing.T, cli *clientv3.Client, members ...*etcdcluster.Member) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := "no status yet"
	for time.Now().Before(deadline) {
		ids, leaders, failed := map[uint64]bool{}, map[uint64]bool{}, ""
		for _, m := range members {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := cli.Status(ctx, m.ClientURL)
			cancel()
			if err != nil {
				failed = fmt.Sprintf("%s: %v", m.Name, err)
				break
			}
			ids[st.Header.MemberId], leaders[st.Leader] = true, true
		}
		if failed == "" && len(leaders) == 1 {
			for l := range leaders {
				if ids[l] {
					return
				}
			}
		}
		last = fmt.Sprintf("leaders named %v, members %v", leaders, ids)
		if failed != "" {
			last = failed
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no leader among the members after 30s: %s", last)
}

// byName is h's member named name.
func byName(h *Health, name string) *MemberHealth {
	for i := range h.Members {
		if h.Members[i].Name == name {
			return &h.Members[i]
		}
	}
	return nil
}

// TestCheckQuorumThreeMembers: a healthy three-member cluster passes; an
// unknown self is refused; with one member killed, and with one paused, the
// gate refuses and names that member.
func TestCheckQuorumThreeMembers(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 3, "3.6")
	cli := c.Client(t)
	ctx := context.Background()

	h, err := CheckQuorum(ctx, cli, "m0")
	if err != nil {
		t.Fatalf("healthy cluster refused: %v", err)
	}
	if len(h.Members) != 3 || h.Self == 0 || h.Leader == 0 || h.member(h.Leader) == nil {
		t.Fatalf("health = %+v, want 3 members, self and a leader among them", h)
	}
	for _, m := range h.Members {
		if !m.Started || !m.Healthy || !m.Answered || m.Leader != h.Leader || len(m.Alarms) > 0 || m.RaftIndex == 0 || !strings.HasPrefix(m.Version, "3.6.") || m.Err != "" {
			t.Fatalf("member %+v, want started, healthy, raft index, version 3.6.x", m)
		}
		if m.ID == h.Self && m.Name != "m0" {
			t.Fatalf("self is %s, want m0", m.Name)
		}
	}

	_, err = CheckQuorum(ctx, cli, "nosuch")
	if ge := refusal(t, err, CheckSelf, "nosuch"); !strings.Contains(ge.Reason, "m0, m1, m2") {
		t.Fatalf("self refusal %q does not list the members", ge.Reason)
	}

	if err := c.Members[1].Pause(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, cli, c.Members[0], c.Members[2])
	_, err = CheckQuorum(ctx, c.Client(t, c.Members[0], c.Members[2]), "m0")
	refusal(t, err, CheckHealthy, "m1")
	if err := c.Members[1].Resume(); err != nil {
		t.Fatal(err)
	}
	if err := WaitCaughtUp(ctx, cli, "m1", 10, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := c.Members[2].Kill(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, cli, c.Members[0], c.Members[1])
	h, err = CheckQuorum(ctx, cli, "m0")
	ge := refusal(t, err, CheckHealthy, "m2")
	if m2 := byName(h, "m2"); m2.Answered || m2.Leader != 0 || m2.Votes() || !h.member(h.Self).Votes() {
		t.Fatalf("with m2 killed: m2 %+v, self %+v; want m2 silent, self voting", m2, h.member(h.Self))
	}
	if !strings.Contains(ge.Error(), "would leave 1 of 3 members (quorum 2)") {
		t.Fatalf("refusal %q does not say the quorum it would lose", ge.Error())
	}
	if h == nil || len(h.Members) != 3 {
		t.Fatalf("refusal returned health %+v, want the 3 members seen", h)
	}
}

// TestCheckQuorumTwoMembers: two healthy members are refused: either one
// down loses quorum.
func TestCheckQuorumTwoMembers(t *testing.T) {
	c := etcdcluster.Start(t, 2, "3.6")
	_, err := CheckQuorum(context.Background(), c.Client(t), "m1")
	ge := refusal(t, err, CheckQuorumSize, "m1")
	if !strings.Contains(ge.Reason, "2 members and needs 2 for quorum") {
		t.Fatalf("reason %q does not give the quorum arithmetic", ge.Reason)
	}
	if errors.Is(err, ErrSingleMember) {
		t.Fatal("two-member refusal matches ErrSingleMember")
	}
}

// TestCheckQuorumSingleMember: one member is ErrSingleMember, the caller's
// decision.
func TestCheckQuorumSingleMember(t *testing.T) {
	c := etcdcluster.Start(t, 1, "3.6")
	_, err := CheckQuorum(context.Background(), c.Client(t), "m0")
	refusal(t, err, CheckSingle, "m0")
	if !errors.Is(err, ErrSingleMember) {
		t.Fatalf("err = %v, want ErrSingleMember", err)
	}
}

// TestMoveLeaderOff: when self leads, leadership moves to another member
// (every member's status agrees); when it does not, nothing changes.
func TestMoveLeaderOff(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	cli := c.Client(t)
	ctx := context.Background()
	h, err := CheckQuorum(ctx, cli, "m0")
	if err != nil {
		t.Fatal(err)
	}
	leader := h.member(h.Leader).Name

	var follower string
	for _, m := range h.Members {
		if m.ID != h.Leader {
			follower = m.Name
		}
	}
	if err := MoveLeaderOff(ctx, cli, follower, 10*time.Second); err != nil {
		t.Fatalf("MoveLeaderOff of follower %s: %v", follower, err)
	}
	if got := leaderOf(t, cli, c.Members[0].ClientURL); got != h.Leader {
		t.Fatalf("MoveLeaderOff of a follower moved the leader %x -> %x", h.Leader, got)
	}

	if err := MoveLeaderOff(ctx, cli, leader, 20*time.Second); err != nil {
		t.Fatalf("MoveLeaderOff of leader %s: %v", leader, err)
	}
	for _, m := range c.Members {
		if got := leaderOf(t, cli, m.ClientURL); got == h.Leader || got == 0 {
			t.Fatalf("%s names leader %x after moving it off %s (%x)", m.Name, got, leader, h.Leader)
		}
	}

	err = MoveLeaderOff(ctx, cli, "nosuch", time.Second)
	refusal(t, err, CheckSelf, "nosuch")
}

// TestWaitCaughtUp: a member killed while writes go on, then started again,
// catches up; a member that stays down times out with what was awaited and
// seen.
func TestWaitCaughtUp(t *testing.T) {
	t.Parallel() // a cluster of its own; most of it is waiting on leases and elections
	c := etcdcluster.Start(t, 3, "3.6")
	cli := c.Client(t)
	ctx := context.Background()
	self := c.Members[2]
	if err := self.Kill(); err != nil {
		t.Fatal(err)
	}
	others := c.Client(t, c.Members[0], c.Members[1])
	waitLeader(t, others, c.Members[0], c.Members[1])
	for i := range 200 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := others.Put(wctx, fmt.Sprintf("k%d", i), "v")
		cancel()
		if err != nil {
			t.Fatalf("put %d with %s down: %v", i, self.Name, err)
		}
	}
	if err := self.Start(); err != nil {
		t.Fatal(err)
	}
	if err := WaitCaughtUp(ctx, cli, self.Name, 5, 30*time.Second); err != nil {
		t.Fatalf("restarted %s: %v", self.Name, err)
	}
	h, err := CheckQuorum(ctx, cli, self.Name)
	if err != nil {
		t.Fatal(err)
	}
	if me, lead := h.member(h.Self), h.member(h.Leader); lead.RaftIndex > me.RaftIndex+5+10 {
		t.Fatalf("caught up at raft index %d, leader at %d", me.RaftIndex, lead.RaftIndex)
	}

	if err := self.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = WaitCaughtUp(ctx, cli, self.Name, 5, 3*time.Second)
	took := time.Since(start)
	ge := refusal(t, err, CheckCaughtUp, self.Name)
	for _, want := range []string{"waited 3s", "within 5 raft entries", "last saw: ", "no status from " + self.ClientURL} {
		if !strings.Contains(ge.Error(), want) {
			t.Errorf("timeout %q does not say %q", ge.Error(), want)
		}
	}
	if took > 3*time.Second+StatusTimeout {
		t.Errorf("3s wait took %s", took)
	}
}

// TestKeepsQuorum: n voting members, down of them not answering.
func TestKeepsQuorum(t *testing.T) {
	for _, tc := range []struct {
		n, down int
		want    bool
	}{
		{1, 0, true}, {1, 1, false},
		{2, 0, true}, {2, 1, false}, {2, 2, false},
		{3, 0, true}, {3, 1, true}, {3, 2, false}, {3, 3, false},
		{4, 0, true}, {4, 1, true}, {4, 2, false}, {4, 3, false},
		{5, 0, true}, {5, 1, true}, {5, 2, true}, {5, 3, false}, {5, 5, false},
	} {
		if got := keepsQuorum(tc.n, tc.down); got != tc.want {
			t.Errorf("keepsQuorum(%d members, %d down) = %v, want %v", tc.n, tc.down, got, tc.want)
		}
	}
}

// TestGateErrorMessage: the message names the check, the member and the
// reason, and wraps the cause.
func TestGateErrorMessage(t *testing.T) {
	cause := errors.New("connection refused")
	err := error(&GateError{Check: CheckMemberList, Reason: "cannot read the etcd member list", Err: cause})
	if got, want := err.Error(), "etcd gate (member-list): cannot read the etcd member list: connection refused"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrGate) || !errors.Is(err, cause) || errors.Is(err, ErrSingleMember) {
		t.Fatal("errors.Is: want ErrGate and the cause, not ErrSingleMember")
	}
	err = &GateError{Check: CheckSingle, Member: "m0", Reason: "is the only etcd member"}
	if got, want := err.Error(), "etcd gate (single-member): member m0: is the only etcd member"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// TestCaughtUpCondition: WaitCaughtUp's condition on one observation, and
// what it reports when it does not hold.
func TestCaughtUpCondition(t *testing.T) {
	obs := func(selfIdx, leaderIdx uint64, selfHealthy bool, leader uint64) *Health {
		self := MemberHealth{ID: 2, Name: "m1", Started: true, Healthy: selfHealthy, Answered: selfHealthy, Leader: 1, RaftIndex: selfIdx}
		if !selfHealthy {
			self.Err, self.Leader = "no status from http://x: refused", 0
		}
		return &Health{Self: 2, Leader: leader, Members: []MemberHealth{
			{ID: 1, Name: "m0", Started: true, Healthy: true, Answered: true, Leader: 1, RaftIndex: leaderIdx}, self,
		}}
	}
	for _, tc := range []struct {
		name string
		h    *Health
		ok   bool
		saw  string
	}{
		{"within lag", obs(95, 100, true, 1), true, ""},
		{"at lag", obs(90, 100, true, 1), true, ""},
		{"ahead of the leader's last status", obs(101, 100, true, 1), true, ""},
		{"behind", obs(89, 100, true, 1), false, "raft index 89, leader m0 at 100 (lag 11 > 10)"},
		{"down", obs(0, 100, false, 1), false, "m1 no status from http://x: refused"},
		{"an alarm raised on it", func() *Health {
			h := obs(95, 100, true, 1)
			h.Members[1].Healthy, h.Members[1].Alarms, h.Members[1].Err = false, []string{"NOSPACE"}, "alarm NOSPACE is raised on it"
			return h
		}(), true, ""},
		{"no leader", obs(100, 100, true, 0), false, "no leader all members agree on"},
		{"not in the list", &Health{Leader: 1, Members: []MemberHealth{{ID: 1, Name: "m0", Healthy: true}}}, false, "not in the member list (members: m0)"},
	} {
		ok, saw := caughtUp(tc.h, "m1", 10)
		if ok != tc.ok || !strings.Contains(saw, tc.saw) {
			t.Errorf("%s: caughtUp = %v, %q; want %v, %q", tc.name, ok, saw, tc.ok, tc.saw)
		}
	}
}

// TestMemberHealthWithAnAlarm (issue 37): a real NOSPACE alarm raised on
// m1 (its backend quota filled) is listed in every member's status, since
// etcd's alarm store is replicated. Each member still answers and names
// the leader (a vote of the quorum); only m1 carries the alarm. The gate
// refuses naming the alarm and m1; with m2 killed too it names m2, whose
// vote is gone, and m0 still answers and votes.
func TestMemberHealthWithAnAlarm(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	c.RaiseNoSpace(t, c.Members[1])
	cli := c.Client(t)
	ctx := context.Background()

	h, err := CheckQuorum(ctx, cli, "m0")
	ge := refusal(t, err, CheckAlarm, "m1")
	if !strings.Contains(ge.Error(), "NOSPACE") {
		t.Fatalf("refusal %q does not name the alarm", ge.Error())
	}
	for _, m := range h.Members {
		if !m.Answered || m.Leader == 0 || m.Leader != h.Leader || !m.Votes() {
			t.Fatalf("member %+v: want it answering and naming the leader %x", m, h.Leader)
		}
		alarmed := m.Name == "m1"
		if got := slices.Equal(m.Alarms, []string{"NOSPACE"}); got != alarmed || m.Healthy == alarmed {
			t.Fatalf("member %s: alarms %v healthy %v (%s); want NOSPACE on m1 only", m.Name, m.Alarms, m.Healthy, m.Err)
		}
	}

	if err := c.Members[2].Kill(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, cli, c.Members[0], c.Members[1])
	h, err = CheckQuorum(ctx, cli, "m0")
	refusal(t, err, CheckHealthy, "m2")
	if self := h.member(h.Self); !self.Answered || !self.Votes() || len(self.Alarms) > 0 {
		t.Fatalf("m0 with m2 down and NOSPACE on m1: %+v; want it answering and voting", self)
	}

	c.ClearNoSpace(t, c.Members[1]) // first: /health, which Start waits on, is false under an alarm
	if err := c.Members[2].Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckQuorum(ctx, cli, "m0"); err != nil {
		t.Fatalf("alarm disarmed, every member back: %v", err)
	}
}
