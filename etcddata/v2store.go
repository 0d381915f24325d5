// What etcd 3.6 finds in a member's v2 store when it starts: the store
// recovered from the newest snapshot, then the v2 requests of the WAL after
// it replayed as etcd 3.5 applies them (apply_v2.go's applierV2store).

package etcddata

import (
	"net/http"
	"sort"
	"time"

	"go.etcd.io/etcd/pkg/v3/pbutil"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v2store"
	"go.etcd.io/raft/v3/raftpb"
)

// The v2 store's namespaces, as etcd creates it (etcdserver's
// StoreClusterPrefix and StoreKeysPrefix).
const (
	v2ClusterPrefix = "/0"
	v2KeysPrefix    = "/1"
)

// maxCustomListed bounds how many custom v2 keys a scan names.
const maxCustomListed = 10

// v2Replay is the v2 store being rebuilt.
type v2Replay struct {
	st v2store.Store
}

// newV2Replay is the store of snapshot data (the v2 store's JSON, nil: no
// snapshot yet, an empty store).
func newV2Replay(data []byte) (*v2Replay, error) {
	st := v2store.New(v2ClusterPrefix, v2KeysPrefix)
	if len(data) > 0 {
		if err := st.Recovery(data); err != nil {
			return nil, err
		}
	}
	return &v2Replay{st: st}, nil
}

// apply replays entry e's v2 request, if it holds one, as etcd 3.5's
// applier does; an error of the store (a compare that fails, a key that
// is not there) is etcd's answer to the client, not a replay failure.
// Member attributes and the cluster version never touch the store, and
// membership changes only its cluster namespace: neither is custom.
func (v *v2Replay) apply(e raftpb.Entry) {
	r, _, _ := v2Request(e)
	if r == nil {
		return
	}
	ttl := v2store.TTLOptionSet{}
	if refresh, ok := pbutil.GetBool(r.Refresh); ok {
		ttl.Refresh = refresh
	}
	if r.Expiration != 0 {
		ttl.ExpireTime = time.Unix(0, r.Expiration)
	}
	switch r.Method {
	case http.MethodPost:
		v.st.Create(r.Path, r.Dir, r.Val, true, ttl)
	case http.MethodPut:
		exists, existsSet := pbutil.GetBool(r.PrevExist)
		switch {
		case existsSet && exists && r.PrevIndex == 0 && r.PrevValue == "":
			v.st.Update(r.Path, r.Val, ttl)
		case existsSet && exists:
			v.st.CompareAndSwap(r.Path, r.PrevValue, r.PrevIndex, r.Val, ttl)
		case existsSet:
			v.st.Create(r.Path, r.Dir, r.Val, false, ttl)
		case r.PrevIndex > 0 || r.PrevValue != "":
			v.st.CompareAndSwap(r.Path, r.PrevValue, r.PrevIndex, r.Val, ttl)
		case memberAttributes.MatchString(r.Path) || r.Path == membership.StoreClusterVersionKey():
		default:
			v.st.Set(r.Path, r.Dir, r.Val, ttl)
		}
	case http.MethodDelete:
		if r.PrevIndex > 0 || r.PrevValue != "" {
			v.st.CompareAndDelete(r.Path, r.PrevValue, r.PrevIndex)
		} else {
			v.st.Delete(r.Path, r.Dir, r.Recursive)
		}
	case "SYNC":
		v.st.DeleteExpiredKeys(time.Unix(0, r.Time))
	}
}

// custom is the v2 store's custom content as etcd 3.6 judges it
// (membership.IsMetaStoreOnly): nil when it holds only etcd's own; else
// up to maxCustomListed of its keys and how many there are in all.
func (v *v2Replay) custom() ([]string, int, error) {
	meta, err := membership.IsMetaStoreOnly(v.st)
	if err != nil || meta {
		return nil, 0, err
	}
	ev, err := v.st.Get("/", true, true)
	if err != nil {
		return nil, 0, err
	}
	var keys []string
	var walk func(n *v2store.NodeExtern)
	walk = func(n *v2store.NodeExtern) {
		if !n.Dir || len(n.Nodes) == 0 {
			keys = append(keys, n.Key)
		}
		for _, c := range n.Nodes {
			walk(c)
		}
	}
	for _, n := range ev.Node.Nodes {
		if n.Key == v2ClusterPrefix {
			continue
		}
		if !n.Dir {
			keys = append(keys, n.Key)
		}
		for _, c := range n.Nodes { // a namespace itself is etcd's own
			walk(c)
		}
	}
	sort.Strings(keys)
	return keys[:min(len(keys), maxCustomListed)], len(keys), nil
}
