package cluster

// What the gate sees of each member: the member list, every member's
// status at its own client URL, and the alarms raised, sorted out by the
// member they are raised on.

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// observe reads the member list through cli and every member's status at
// its own client URL, all members at once, and the alarms raised on each.
// It returns an error only when the list cannot be read. Health.Leader is
// set when every member that votes names the same leader and that leader
// is in the list.
func observe(ctx context.Context, cli *clientv3.Client, self string) (*Health, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*StatusTimeout)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return nil, &GateError{Check: CheckMemberList, Reason: "cannot read the etcd member list; check that etcd answers at " + strings.Join(cli.Endpoints(), ", "), Err: err}
	}
	h := &Health{Members: make([]MemberHealth, len(list.Members))}
	listed := make([][]raised, len(list.Members))
	var wg sync.WaitGroup
	for i, m := range list.Members {
		if m.Name == self && self != "" {
			h.Self = m.ID
		}
		wg.Go(func() { h.Members[i], listed[i] = probe(ctx, cli, m) })
	}
	wg.Wait()
	for _, l := range listed {
		h.raise(l)
	}
	h.raise(alarms(ctx, cli))
	leaders := map[uint64]bool{}
	for _, m := range h.Members {
		if m.Votes() {
			leaders[m.Leader] = true
		}
	}
	for id := range leaders {
		if len(leaders) == 1 && h.member(id) != nil {
			h.Leader = id
		}
	}
	return h, nil
}

// raised is one alarm of etcd's alarm store: which alarm, on which member.
type raised struct {
	member uint64
	alarm  string
}

// alarmText is how a status lists an alarm among its errors (the text form
// of etcdserverpb.AlarmMember: "memberID:123 alarm:NOSPACE").
var alarmText = regexp.MustCompile(`memberID:\s*(\d+)\s+alarm:\s*([A-Z_]+)`)

// raise records each alarm on the member it is raised on, once: that
// member is not healthy, whoever reported it.
func (h *Health) raise(as []raised) {
	for _, a := range as {
		m := h.member(a.member)
		if m == nil || a.alarm == etcdserverpb.AlarmType_NONE.String() || slices.Contains(m.Alarms, a.alarm) {
			continue
		}
		m.Alarms = append(m.Alarms, a.alarm)
		m.Healthy, m.Err = false, "alarm "+strings.Join(m.Alarms, ", ")+" is raised on it"
	}
}

// probe is one member's health, from its status at its own client URLs,
// and the alarms that status lists (every member's, not only its own).
func probe(ctx context.Context, cli *clientv3.Client, m *etcdserverpb.Member) (MemberHealth, []raised) {
	mh := MemberHealth{ID: m.ID, Name: m.Name, ClientURLs: slices.Clone(m.ClientURLs)}
	mh.Started = m.Name != "" && len(m.ClientURLs) > 0
	if !mh.Started {
		mh.Err = "not started"
		return mh, nil
	}
	if m.IsLearner {
		mh.Err = "is a learner, not a voting member"
		return mh, nil
	}
	var st *clientv3.StatusResponse
	var err error
	for _, u := range m.ClientURLs { // the first URL that answers
		sctx, cancel := context.WithTimeout(ctx, StatusTimeout)
		st, err = cli.Status(sctx, u)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		mh.Err = fmt.Sprintf("no status from %s: %v", strings.Join(m.ClientURLs, ", "), err)
		return mh, nil
	}
	if st.Header == nil || st.Header.MemberId != m.ID {
		mh.Err = fmt.Sprintf("%s answered as member %x", strings.Join(m.ClientURLs, ", "), st.Header.GetMemberId())
		return mh, nil
	}
	var as []raised
	var errs []string
	for _, e := range st.Errors {
		if sub := alarmText.FindStringSubmatch(e); sub != nil {
			id, _ := strconv.ParseUint(sub[1], 10, 64)
			as = append(as, raised{id, sub[2]})
		} else {
			errs = append(errs, e)
		}
	}
	mh.Answered, mh.Leader = true, st.Leader
	mh.RaftIndex, mh.Version, mh.StorageVersion = st.RaftIndex, st.Version, st.StorageVersion
	if d := st.DowngradeInfo; d != nil && d.Enabled {
		mh.Downgrading = d.TargetVersion
	}
	switch {
	case len(errs) > 0:
		mh.Err = "reports errors: " + strings.Join(errs, "; ")
	case st.Leader == 0:
		mh.Err = "knows no leader"
	default:
		mh.Healthy = true
	}
	return mh, as
}

// alarms is etcd's alarm list, nil when it cannot be read (each status
// lists the alarms too).
func alarms(ctx context.Context, cli *clientv3.Client) []raised {
	actx, cancel := context.WithTimeout(ctx, StatusTimeout)
	defer cancel()
	resp, err := cli.AlarmList(actx)
	if err != nil {
		return nil
	}
	var as []raised
	for _, a := range resp.Alarms {
		as = append(as, raised{a.MemberID, a.Alarm.String()})
	}
	return as
}
