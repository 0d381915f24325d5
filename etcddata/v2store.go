// What etcd 3.6 finds in a member's v2 store when it starts: the store
// recovered from the newest snapshot, then the v2 requests of the WAL after
// it replayed as etcd 3.5 applies them (apply_v2.go's applierV2store).

package etcddata

import (
	"fmt"
	"net/http"
	"path"
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
	// v2AuthPrefix is where etcd 3.5's v2 auth keeps its users and roles
	// (membership.IsMetaStoreOnly's storePermsPrefix).
	v2AuthPrefix = "/2"
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

// apply replays entry e as etcd 3.5 applies it to the v2 store: its v2
// request, if it holds one (applierV2store), or its membership change
// (membership/store.go); an error of the store (a compare that fails, a
// key that is not there) is etcd's answer to the client, not a replay
// failure. etcd's own writes (member attributes, the cluster version,
// membership) go to the cluster namespace, which is never custom, and are
// replayed all the same: each moves the store's index, which names the
// keys of an in-order POST and decides a compare by index.
func (v *v2Replay) apply(e raftpb.Entry) {
	if e.Type == raftpb.EntryConfChange {
		v.applyConfChange(e)
		return
	}
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
			// The cluster's UpdateAttributes and SetVersion write them
			// with no TTL.
			v.st.Set(r.Path, false, r.Val, v2store.TTLOptionSet{ExpireTime: v2store.Permanent})
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

// applyConfChange replays a membership change as etcd 3.5's cluster
// writes it to the v2 store (membership/store.go): a member added or
// updated sets its raftAttributes, one removed is deleted and recorded as
// removed. A change etcd refused wrote nothing there; the replay cannot
// tell, and writes it.
func (v *v2Replay) applyConfChange(e raftpb.Entry) {
	var cc raftpb.ConfChange
	if err := cc.Unmarshal(e.Data); err != nil {
		return
	}
	id := fmt.Sprintf("%x", cc.NodeID)
	permanent := v2store.TTLOptionSet{ExpireTime: v2store.Permanent}
	member := path.Join(v2ClusterPrefix, "members", id)
	switch cc.Type {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode, raftpb.ConfChangeUpdateNode:
		v.st.Set(path.Join(member, "raftAttributes"), false, string(cc.Context), permanent)
	case raftpb.ConfChangeRemoveNode:
		v.st.Delete(member, true, true)
		v.st.Create(path.Join(v2ClusterPrefix, "removed_members", id), false, "", false, permanent)
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
		switch {
		case n.Key == v2ClusterPrefix:
		case n.Key == v2AuthPrefix:
			// v2 auth: its enabled flag and empty users and roles
			// directories are etcd's own; a user or role in them is not.
			for _, c := range n.Nodes {
				for _, gc := range c.Nodes {
					walk(gc)
				}
			}
		default:
			if !n.Dir {
				keys = append(keys, n.Key)
			}
			for _, c := range n.Nodes { // a namespace itself is etcd's own
				walk(c)
			}
		}
	}
	sort.Strings(keys)
	return keys[:min(len(keys), maxCustomListed)], len(keys), nil
}
