// Reading a member's WAL history read-only for the entries a newer etcd
// refuses to replay at start (ScanWAL, WALScan.Hazards).

package etcddata

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"

	"go.uber.org/zap"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/pkg/v3/pbutil"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
)

// WALScan is what a member's WAL holds after its newest snapshot: the
// entries every etcd replays when it starts.
type WALScan struct {
	// SnapshotIndex is the raft index of the newest snapshot (0: none).
	SnapshotIndex uint64
	// Entries is the number of entries after it.
	Entries int
	// RawV2 is the entries that are a bare v2 request (etcd 3.5 proposes
	// its member attributes and cluster version so), which etcd 3.7 cannot
	// decode at all.
	RawV2 int
	// DisallowedV2 is the v2 requests, bare or wrapped, that etcd 3.6 does
	// not accept (anything but a PUT of member attributes or of the
	// cluster version): it panics on them.
	DisallowedV2 int
	// FirstIndex is the index of the first entry counted in RawV2 or
	// DisallowedV2 (0: none).
	FirstIndex uint64
	// V2Custom is up to 10 keys of the custom content of the v2 store
	// (the newest snapshot's, with the WAL's v2 requests replayed), and
	// V2CustomTotal how many there are: etcd 3.6 refuses to start on a v2
	// store that holds any ("detected disallowed custom content in
	// v2store"), and no snapshot removes it. Nil when it holds only
	// etcd's own.
	V2Custom      []string
	V2CustomTotal int
}

// memberAttributes is etcd 3.6's own pattern of a v2 member attributes
// path (server.go's storeMemberAttributeRegexp).
var memberAttributes = regexp.MustCompile(path.Join(membership.StoreMembersPrefix, "[[:xdigit:]]{1,16}", "attributes"))

// ScanWAL reads the WAL of the etcd data dir dataDir read-only, from its
// newest snapshot on, as etcd does when it starts, and counts the entries
// a newer etcd refuses. It changes nothing and takes no lock, so it can
// read a running member's WAL: a record being written is the torn tail
// read mode allows.
func ScanWAL(dataDir string) (*WALScan, error) {
	lg := zap.NewNop()
	walDir := datadir.ToWALDir(dataDir)
	walSnaps, err := wal.ValidSnapshotEntries(lg, walDir)
	if err != nil {
		return nil, fmt.Errorf("etcd WAL %s: snapshot entries: %w", walDir, err)
	}
	start := walpb.Snapshot{}
	var v2data []byte
	if s, err := snap.New(lg, datadir.ToSnapDir(dataDir)).LoadNewestAvailable(walSnaps); err == nil {
		start = walpb.Snapshot{Index: s.Metadata.Index, Term: s.Metadata.Term}
		v2data = s.Data
	} else if !errors.Is(err, snap.ErrNoSnapshot) {
		return nil, fmt.Errorf("etcd snapshots in %s: %w", datadir.ToSnapDir(dataDir), err)
	}
	w, err := wal.OpenForRead(lg, walDir, start)
	if err != nil {
		return nil, fmt.Errorf("etcd WAL %s: %w", walDir, err)
	}
	defer w.Close()
	_, _, ents, err := w.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("etcd WAL %s: %w", walDir, err)
	}
	out := &WALScan{SnapshotIndex: start.Index, Entries: len(ents)}
	v2, err := newV2Replay(v2data)
	if err != nil {
		return nil, fmt.Errorf("etcd snapshot in %s: its v2 store: %w", datadir.ToSnapDir(dataDir), err)
	}
	for _, e := range ents {
		v2.apply(e)
		raw, disallowed := classify(e)
		if raw {
			out.RawV2++
		}
		if disallowed {
			out.DisallowedV2++
		}
		if (raw || disallowed) && out.FirstIndex == 0 {
			out.FirstIndex = e.Index
		}
	}
	if out.V2Custom, out.V2CustomTotal, err = v2.custom(); err != nil {
		return nil, fmt.Errorf("etcd data %s: its v2 store: %w", dataDir, err)
	}
	return out, nil
}

// V2StoreRefused reports whether an etcd of minor to ("3.6") refuses to
// start on the member's v2 store: from 3.6 on, custom content in it.
func (s *WALScan) V2StoreRefused(to string) bool {
	return s.V2CustomTotal > 0 && minorAtLeast(to, 6)
}

// classify says whether entry e is a bare v2 request, and whether it is a
// v2 request etcd 3.6 refuses (apply_v2.go's v2ToV3Request).
func classify(e raftpb.Entry) (raw, disallowed bool) {
	v2, raw, ok := v2Request(e)
	if !ok {
		return true, true // neither: no etcd decodes it
	}
	if v2 == nil {
		return raw, false
	}
	allowed := v2.Method == http.MethodPut && (memberAttributes.MatchString(v2.Path) || v2.Path == membership.StoreClusterVersionKey())
	return raw, !allowed
}

// v2Request is the v2 request of a normal entry, nil when it holds none
// (a v3 request, an empty or conf-change entry); raw when it is a bare
// pb.Request (etcd 3.5 proposes some so) rather than an
// InternalRaftRequest's V2. ok is false when the entry decodes as neither.
func v2Request(e raftpb.Entry) (r *pb.Request, raw, ok bool) {
	if e.Type != raftpb.EntryNormal || len(e.Data) == 0 {
		return nil, false, true
	}
	var rr pb.InternalRaftRequest
	if pbutil.MaybeUnmarshal(&rr, e.Data) {
		return rr.V2, false, true
	}
	var bare pb.Request
	if !pbutil.MaybeUnmarshal(&bare, e.Data) {
		return nil, false, false
	}
	return &bare, true, true
}

// Hazard is one kind of entry in a member's WAL that etcd of minor Minor
// refuses at start, with the etcd issue that describes it.
type Hazard struct {
	Minor, Issue, What string
	Entries            int
}

// Hazards is what of s an etcd of minor to ("3.6", "3.7") refuses.
func (s *WALScan) Hazards(to string) []Hazard {
	var out []Hazard
	if s.DisallowedV2 > 0 && minorAtLeast(to, 6) {
		out = append(out, Hazard{Minor: "3.6", Issue: "etcd-io/etcd#20809", Entries: s.DisallowedV2,
			What: "v2 requests other than member attributes and the cluster version after the last snapshot: etcd 3.6 panics replaying them (\"detected disallowed v2 WAL\")"})
	}
	if s.RawV2 > 0 && minorAtLeast(to, 7) {
		out = append(out, Hazard{Minor: "3.7", Issue: "etcd 3.7 server/etcdserver/apply.Apply (no etcd issue found; TestRealEtcdChain)", Entries: s.RawV2,
			What: "bare v2 requests etcd 3.5 wrote after the last snapshot: etcd 3.7 decodes every entry as a v3 request and panics (\"unmarshal should never fail\")"})
	}
	return out
}

// minorAtLeast reports whether minor "3.N" has N >= n.
func minorAtLeast(minor string, n int) bool {
	var major, m int
	if _, err := fmt.Sscanf(minor, "%d.%d", &major, &m); err != nil {
		return false
	}
	return major > 3 || major == 3 && m >= n
}
