package engine

// The EtcdWALHistory pre-flight check (issue 30 item 3): a move of etcd to
// a minor that refuses entries of the member's WAL history is refused
// before anything is written, naming the hazard and its etcd issue.

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/pkg/v3/pbutil"
	"go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// writeMemberWAL writes a WAL holding reqs as entries 1..n (no snapshot)
// into the member's data dir, with etcd's own wal package.
func writeMemberWAL(t *testing.T, dataDir string, reqs ...pb.Request) {
	t.Helper()
	if err := os.MkdirAll(datadir.ToSnapDir(dataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := wal.Create(zap.NewNop(), datadir.ToWALDir(dataDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ents []raftpb.Entry
	for i := range reqs {
		ents = append(ents, raftpb.Entry{Term: 1, Index: uint64(i + 1), Type: raftpb.EntryNormal, Data: pbutil.MustMarshal(&reqs[i])})
	}
	if err := w.Save(raftpb.HardState{Term: 1, Commit: uint64(len(ents))}, ents); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// Entries the new minor refuses fail no check (the transaction forces a
// snapshot, etcdsnap_test.go); a WAL that cannot be read does, naming the
// check and what it blocks.
func TestPreflightEtcdWALHistory(t *testing.T) {
	publish := pb.Request{ID: 1, Method: "PUT", Path: "/0/members/8e9e05c52164694d/attributes"}
	v2write := pb.Request{ID: 2, Method: "PUT", Path: "/1/foo"}
	v2delete := pb.Request{ID: 3, Method: "DELETE", Path: "/1/foo"}
	for _, c := range []struct {
		name     string
		from, to string
		reqs     []pb.Request
		damage   bool
		want     string // in the refusal; "" for none
		check    string // the refusing check; CheckEtcdWALHistory when ""
		v2depr   string // the target etcd's --v2-deprecation
	}{
		{name: "3.5 v2 write to 3.6", from: "3.5.35-0", to: "3.6.16-0", reqs: []pb.Request{publish, v2write, v2delete}},
		{name: "3.5 publish to 3.7", from: "3.6.16-0", to: "3.7.3-0", reqs: []pb.Request{publish}},
		{name: "unreadable WAL to 3.6", from: "3.5.35-0", to: "3.6.16-0", reqs: []pb.Request{publish}, damage: true, want: "cannot be read"},
		{name: "unreadable WAL within 3.5", from: "3.5.35-0", to: "3.5.36-0", reqs: []pb.Request{v2write}, damage: true},
		{name: "custom v2 content to 3.6", from: "3.5.35-0", to: "3.6.16-0", reqs: []pb.Request{publish, {ID: 3, Method: "PUT", Path: "/1/foo", Val: "bar"}}, want: "/1/foo", check: CheckEtcdV2Store},
		{name: "custom v2 content within 3.5", from: "3.5.35-0", to: "3.5.36-0", reqs: []pb.Request{publish, {ID: 3, Method: "PUT", Path: "/1/foo", Val: "bar"}}},
		{name: "custom v2 content, 3.6 told to drop it", from: "3.5.35-0", to: "3.6.16-0", reqs: []pb.Request{publish, {ID: 3, Method: "PUT", Path: "/1/foo", Val: "bar"}}, v2depr: "write-only-drop-data"},
		{name: "custom v2 content deleted", from: "3.5.35-0", to: "3.6.16-0", reqs: []pb.Request{publish, {ID: 3, Method: "PUT", Path: "/1/foo", Val: "bar"}, {ID: 4, Method: "DELETE", Path: "/1/foo"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newMemNode(t)
			writeMemberWAL(t, n.st.Etcd.DataDir, c.reqs...)
			if c.damage {
				ws, _ := filepath.Glob(filepath.Join(datadir.ToWALDir(n.st.Etcd.DataDir), "*.wal"))
				if len(ws) == 0 {
					t.Fatal("no WAL file written")
				}
				if err := os.WriteFile(ws[0], []byte("not a WAL"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			from, to := n.st.Clone(), n.st.Clone()
			from.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + c.from
			to.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + c.to
			if c.v2depr != "" {
				to.ExtraArgs = map[string]map[string]nodestate.ArgValues{nodestate.Etcd: {"v2-deprecation": {c.v2depr}}}
			}
			var f *versions.Finding
			if fs := (preflight{}).etcdWAL(from, to); len(fs) > 0 {
				f = &fs[0]
			}
			switch {
			case c.want == "" && f != nil:
				t.Errorf("refused: %s", f.Message)
			case c.want != "" && f == nil:
				t.Errorf("not refused, want a refusal naming %q", c.want)
			case c.want != "" && (f.Check != cmp.Or(c.check, CheckEtcdWALHistory) || !strings.Contains(f.Message, c.want)):
				t.Errorf("finding %+v, want %s naming %q", f, cmp.Or(c.check, CheckEtcdWALHistory), c.want)
			}
		})
	}
}

// A plan whose etcd step meets a WAL the new minor refuses says so (the
// forced snapshot, its hazard and etcd issue); one without, or one that
// leaves etcd alone, says nothing.
func TestPlanSaysTheEtcdSnapshotIsForced(t *testing.T) {
	publish := pb.Request{ID: 1, Method: "PUT", Path: "/0/members/8e9e05c52164694d/attributes"}
	v2write := pb.Request{ID: 2, Method: "PUT", Path: "/v2/keys/foo"}
	for _, c := range []struct {
		name     string
		from, to string
		reqs     []pb.Request
		etcd     bool
		want     string
	}{
		{name: "v2 write to 3.6", from: "3.5.35-0", to: "3.6.16-0", reqs: []pb.Request{publish, v2write}, etcd: true, want: "etcd-io/etcd#20809"},
		{name: "bare v2 to 3.7", from: "3.6.16-0", to: "3.7.3-0", reqs: []pb.Request{publish}, etcd: true, want: "etcd 3.7 refuses at start"},
		{name: "clean WAL to 3.6", from: "3.5.35-0", to: "3.6.16-0", reqs: []pb.Request{publish}, etcd: true},
		{name: "etcd unchanged", from: "3.6.16-0", to: "3.7.3-0", reqs: []pb.Request{publish}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newMemNode(t)
			writeMemberWAL(t, n.st.Etcd.DataDir, c.reqs...)
			from, to := n.st.Clone(), n.st.Clone()
			from.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + c.from
			to.Images[nodestate.Etcd] = "registry.k8s.io/etcd:" + c.to
			p := &Plan{From: from, To: to}
			if c.etcd {
				p.Changes = []Change{{Component: nodestate.Etcd}}
			}
			got := p.EtcdSnapshotForced()
			switch {
			case c.want == "" && got != "":
				t.Errorf("says %q, want nothing", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("says %q, want it naming %q", got, c.want)
			}
		})
	}
}
