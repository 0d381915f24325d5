package etcddata

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/pkg/v3/pbutil"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v2store"
	"go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
)

// writeWAL writes a member's WAL holding data as entries 1..n, with a
// snapshot at index snapAt (0: none), as etcd's own wal and snap packages
// write them.
func writeWAL(t *testing.T, data [][]byte, snapAt uint64) string {
	t.Helper()
	return writeWALSnap(t, data, snapAt, []byte("{}"))
}

// writeWALSnap is writeWAL with the snapshot's v2 store data; the first
// confChanges entries are membership changes.
func writeWALSnap(t *testing.T, data [][]byte, snapAt uint64, snapData []byte, confChanges ...int) string {
	t.Helper()
	dir := t.TempDir()
	lg := zap.NewNop()
	if err := os.MkdirAll(datadir.ToSnapDir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := wal.Create(lg, datadir.ToWALDir(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ents []raftpb.Entry
	for i, d := range data {
		typ := raftpb.EntryNormal
		if len(confChanges) > 0 && i < confChanges[0] {
			typ = raftpb.EntryConfChange
		}
		ents = append(ents, raftpb.Entry{Term: 1, Index: uint64(i + 1), Type: typ, Data: d})
	}
	if err := w.Save(raftpb.HardState{Term: 1, Commit: uint64(len(data))}, ents); err != nil {
		t.Fatal(err)
	}
	if snapAt > 0 {
		s := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: snapAt, Term: 1, ConfState: raftpb.ConfState{Voters: []uint64{1}}}, Data: snapData}
		if err := snap.New(lg, datadir.ToSnapDir(dir)).SaveSnap(s); err != nil {
			t.Fatal(err)
		}
		if err := w.SaveSnapshot(walpb.Snapshot{Index: snapAt, Term: 1, ConfState: &s.Metadata.ConfState}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The WAL's history after its newest snapshot, classified as etcd 3.6 and
// 3.7 replay it: 3.5's bare member-attributes publish is refused by 3.7
// only; a v2 write (bare or wrapped) by 3.6 too; v3 requests by neither;
// entries covered by a snapshot are not replayed, so they do not count.
func TestScanWALHazards(t *testing.T) {
	raw := func(method, p string) []byte {
		r := pb.Request{ID: 1, Method: method, Path: p}
		return pbutil.MustMarshal(&r)
	}
	v3 := pbutil.MustMarshal(&pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 2}, Put: &pb.PutRequest{Key: []byte("k")}})
	wrapped := pbutil.MustMarshal(&pb.InternalRaftRequest{ID: 3, V2: &pb.Request{ID: 3, Method: "DELETE", Path: "/foo"}})
	publish := raw("PUT", "/0/members/8e9e05c52164694d/attributes")
	data := [][]byte{raw("PUT", "/v2/keys/foo"), publish, v3, wrapped, publish, v3}
	for _, c := range []struct {
		name                       string
		snapAt                     uint64
		entries, rawV2, disallowed int
		first                      uint64
		hazards36, hazards37       int
	}{
		{name: "no snapshot", entries: 6, rawV2: 3, disallowed: 2, first: 1, hazards36: 1, hazards37: 2},
		{name: "snapshot past the v2 write", snapAt: 4, entries: 2, rawV2: 1, disallowed: 0, first: 5, hazards36: 0, hazards37: 1},
		{name: "snapshot covers everything", snapAt: 6, entries: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeWAL(t, data, c.snapAt)
			s, err := ScanWAL(dir)
			if err != nil {
				t.Fatal(err)
			}
			if s.Entries != c.entries || s.RawV2 != c.rawV2 || s.DisallowedV2 != c.disallowed || s.FirstIndex != c.first || s.SnapshotIndex != c.snapAt {
				t.Errorf("scan %+v, want %d entries after snapshot %d, %d bare v2, %d disallowed, first %d", *s, c.entries, c.snapAt, c.rawV2, c.disallowed, c.first)
			}
			if h := s.Hazards("3.6"); len(h) != c.hazards36 {
				t.Errorf("hazards for 3.6: %+v, want %d", h, c.hazards36)
			}
			if h := s.Hazards("3.7"); len(h) != c.hazards37 {
				t.Errorf("hazards for 3.7: %+v, want %d", h, c.hazards37)
			}
			if h := s.Hazards("3.5"); len(h) != 0 {
				t.Errorf("hazards for 3.5: %+v, want none", h)
			}
		})
	}
}

// A data dir without a WAL is an error that names it, not a panic.
func TestScanWALNoWAL(t *testing.T) {
	if _, err := ScanWAL(filepath.Join(t.TempDir(), "nothing")); err == nil {
		t.Fatal("scan of a data dir without a WAL succeeded")
	}
}

// The v2 store etcd 3.6 checks at start: the snapshot's, with the WAL's v2
// requests replayed as etcd 3.5 applied them. Custom content left in it is
// refused from 3.6 on (no snapshot removes it); content written and then
// deleted or expired, and etcd's own entries, are not.
func TestScanWALV2StoreCustomContent(t *testing.T) {
	req := func(r pb.Request) []byte { return pbutil.MustMarshal(&r) }
	wrapped := func(r pb.Request) []byte { return pbutil.MustMarshal(&pb.InternalRaftRequest{ID: r.ID, V2: &r}) }
	store := func(keys ...string) []byte {
		st := v2store.New("/0", "/1")
		for _, k := range keys {
			dir := strings.HasSuffix(k, "/")
			if _, err := st.Set(strings.TrimSuffix(k, "/"), dir, "v", v2store.TTLOptionSet{}); err != nil {
				t.Fatal(err)
			}
		}
		b, err := st.Save()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	publish := req(pb.Request{ID: 1, Method: "PUT", Path: "/0/members/8e9e05c52164694d/attributes", Val: `{"name":"cp-1"}`})
	version := req(pb.Request{ID: 2, Method: "PUT", Path: "/0/version", Val: "3.5.0"})
	put := wrapped(pb.Request{ID: 3, Method: "PUT", Path: "/1/foo", Val: "bar"})
	del := wrapped(pb.Request{ID: 4, Method: "DELETE", Path: "/1/foo"})
	past := time.Now().Add(-time.Hour)
	expiring := wrapped(pb.Request{ID: 5, Method: "PUT", Path: "/1/lease", Val: "x", Expiration: past.UnixNano()})
	sync := req(pb.Request{ID: 6, Method: "SYNC", Time: time.Now().UnixNano()})
	// etcd's own writes move the store's index: the first member added,
	// its attributes, the cluster version are indices 1-3, so the key put
	// next is at index 4, and a compare-and-delete by that index takes it.
	addMember := pbutil.MustMarshal(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: 0x8e9e05c52164694d, Context: []byte(`{"peerURLs":["https://10.0.0.11:2380"]}`)})
	casDelete := wrapped(pb.Request{ID: 8, Method: "DELETE", Path: "/1/foo", PrevIndex: 4})
	for _, c := range []struct {
		name        string
		data        [][]byte
		snapAt      uint64
		snapData    []byte
		confChanges int
		want        []string
	}{
		{name: "a v2 write", data: [][]byte{publish, put}, want: []string{"/1/foo"}},
		{name: "written then deleted", data: [][]byte{publish, put, del}},
		{name: "only etcd's own", data: [][]byte{publish, version}},
		{name: "expired by a sync", data: [][]byte{expiring, sync}},
		{name: "in the snapshot", data: [][]byte{publish, publish}, snapAt: 1, snapData: store("/1/kept", "/1/dir/leaf"), want: []string{"/1/dir/leaf", "/1/kept"}},
		{name: "the snapshot's deleted after it", data: [][]byte{publish, wrapped(pb.Request{ID: 7, Method: "DELETE", Path: "/1/kept"})}, snapAt: 1, snapData: store("/1/kept")},
		{name: "compare-and-delete by index after etcd's own writes", data: [][]byte{addMember, publish, version, put, casDelete}, confChanges: 1},
		{name: "v2 auth's own entries", data: [][]byte{publish}, snapAt: 1, snapData: store("/2/enabled", "/2/users/", "/2/roles/", "/1/foo"), want: []string{"/1/foo"}},
		{name: "a v2 auth user", data: [][]byte{publish}, snapAt: 1, snapData: store("/2/enabled", "/2/users/alice"), want: []string{"/2/users/alice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			snapData := c.snapData
			if snapData == nil {
				snapData = store()
			}
			s, err := ScanWAL(writeWALSnap(t, c.data, c.snapAt, snapData, c.confChanges))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.V2Custom, c.want) || s.V2CustomTotal != len(c.want) {
				t.Errorf("custom v2 content %v (%d), want %v", s.V2Custom, s.V2CustomTotal, c.want)
			}
			if got := s.V2StoreRefused("3.6"); got != (len(c.want) > 0) {
				t.Errorf("refused by 3.6: %v, want %v", got, len(c.want) > 0)
			}
			if s.V2StoreRefused("3.5") {
				t.Error("refused by 3.5, which reads its own v2 store")
			}
		})
	}
}
