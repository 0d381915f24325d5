package engine

// The engine works against these small interfaces; the real types
// (*manifest.Store, *proc.Scanner, the etcd client) satisfy them, and the
// in-memory kubelet model of the tests does too.

import (
	"context"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// EtcdData backs up and restores the local etcd member's data. The default
// uses the etcd client's snapshot API and etcdutl's restore library.
type EtcdData interface {
	Backup(ctx context.Context, st *nodestate.NodeState, path string) (*etcddata.Backup, error)
	Restore(ctx context.Context, st *nodestate.NodeState, b *etcddata.Backup, asideDir string) error
}

type etcdData struct{}

func (etcdData) Backup(ctx context.Context, st *nodestate.NodeState, path string) (*etcddata.Backup, error) {
	return etcddata.Take(ctx, etcddata.Endpoint(st), path)
}

func (etcdData) Restore(ctx context.Context, st *nodestate.NodeState, b *etcddata.Backup, asideDir string) error {
	return etcddata.Restore(ctx, st, b, asideDir)
}
