package cluster

// What `status --cluster` shows: every node's progress, the halt and the
// lock holder, read in one etcd revision.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// View is the coordination keys at one revision.
type View struct {
	Revision int64      `json:"revision"`
	Nodes    []Progress `json:"nodes"`
	Halt     *Halt      `json:"halt,omitempty"`
	Holder   *Holder    `json:"holder,omitempty"`
}

// View reads every coordination key at one revision. A value this package
// did not write is an error naming its key.
func (c *Coordinator) View(ctx context.Context) (*View, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	r, err := c.cli.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrUnreachable, Prefix, err)
	}
	v := &View{Revision: r.Header.Revision}
	for _, kv := range r.Kvs {
		key := string(kv.Key)
		switch {
		case key == haltKey:
			h, err := decode[Halt](key, kv.Value)
			if err != nil {
				return nil, err
			}
			v.Halt = &h
		case key == holderKey:
			h, err := decode[Holder](key, kv.Value)
			if err != nil {
				return nil, err
			}
			v.Holder = &h
		case strings.HasPrefix(key, nodesPrefix):
			p, err := decode[Progress](key, kv.Value)
			if err != nil {
				return nil, err
			}
			v.Nodes = append(v.Nodes, p)
		}
	}
	sort.Slice(v.Nodes, func(i, j int) bool { return v.Nodes[i].Node < v.Nodes[j].Node })
	return v, nil
}

// Node is one node's progress (nil when it never recorded one).
func (c *Coordinator) Node(ctx context.Context, node string) (*Progress, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	r, err := c.cli.Get(ctx, nodesPrefix+node)
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrUnreachable, nodesPrefix+node, err)
	}
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	p, err := decode[Progress](nodesPrefix+node, r.Kvs[0].Value)
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// MarkEtcdDowngrade records in this node's progress that its transaction
// enabled etcd's downgrade to minor ("" once it cancelled it), so that
// status --cluster names who enabled a downgrade etcd reports. Best
// effort, as Phase: the node's journal holds the truth.
func (h *Hold) MarkEtcdDowngrade(ctx context.Context, minor string) {
	if h.progress.Txn == "" || h.progress.EtcdDowngrade == minor {
		return
	}
	h.progress.EtcdDowngrade, h.progress.Updated = minor, time.Now().UTC()
	if err := h.write(ctx); err != nil {
		h.c.cfg.Log.Warn("the cluster's view of this node's etcd downgrade is behind", "txn", h.progress.Txn, "downgrade", minor, "err", err)
	}
}

// EnabledBy is the node whose transaction recorded that it enabled etcd's
// downgrade to the minor of target ("3.5.0"), nil when none did.
func (v *View) EnabledBy(target string) *Progress {
	for i := range v.Nodes {
		if d := v.Nodes[i].EtcdDowngrade; d != "" && d == minorOf(target) {
			return &v.Nodes[i]
		}
	}
	return nil
}
