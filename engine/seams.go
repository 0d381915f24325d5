package engine

// The engine works against three small interfaces: the manifest directory,
// the process watcher and etcd's data. The real types (*manifest.Store,
// *proc.Scanner, the etcd client) satisfy them; so does the in-memory
// kubelet model the table-driven crash matrix runs on.

import (
	"context"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// Manifests is the manifest directory, of which the engine is the sole
// writer through this interface. *manifest.Store satisfies it; see its
// methods for the exact guarantees (every write atomic and durable).
type Manifests interface {
	snapshot.Store
	Read(name string) ([]byte, error)
	Put(name string, b []byte) (changed bool, err error)
	Start(st *nodestate.NodeState, name string) error
	RestartAsIs(name, stamp string) (changed bool, err error)
	Stop(ctx context.Context, st *nodestate.NodeState, name string, timeout time.Duration) error
	Stamp() string
	// RestartedAtOnDisk is the restarted-at of a manifest on disk ("" when
	// it has none or does not decode).
	RestartedAtOnDisk(name string) (string, error)
	// CheckShadows refuses a stray file that kubelet would run in place of
	// a roster component's pod.
	CheckShadows(roster []string) error
}

// Processes observes the component processes kubelet runs. *proc.Scanner
// satisfies it; see package proc for identities and marks.
type Processes interface {
	Mark() (proc.Mark, error)
	PastMark(ctx context.Context, m proc.Mark) error
	// Of is the processes that are t's: of t.Binary, in its static pod's
	// cgroup where kubelet makes pod cgroups (proc.Scanner.Identify).
	Of(t proc.Target) ([]proc.Process, error)
	Active(ctx context.Context, t proc.Target) bool
	WaitActive(ctx context.Context, t proc.Target, timeout time.Duration) error
	WaitReplaced(ctx context.Context, t proc.Target, m proc.Mark, timeout time.Duration) error
	// Replaced is one look at what WaitReplaced waits for: done when at
	// least one process of t.Binary runs and none started before m; stale
	// are those that did. An error means the answer is unknown.
	Replaced(t proc.Target, m proc.Mark) (done bool, stale []proc.Process, err error)
	WaitGone(ctx context.Context, t proc.Target, timeout time.Duration) error
	// Arm is PIDs(t.Binary) that also readies the next WaitReplaced of t:
	// it may start from this answer (and what happens after it) instead
	// of looking at every process again. Arming does not change what that
	// wait decides.
	Arm(t proc.Target) ([]proc.Process, error)
	// PodCgroups is the pod cgroup directories of ps (none when they
	// cannot be seen); WaitCgroupsGone waits until they are gone.
	PodCgroups(ps []proc.Process) ([]string, error)
	WaitCgroupsGone(ctx context.Context, dirs []string, timeout time.Duration) error
}

// EtcdData backs up and restores the local etcd member's data. The default
// uses the etcd client's snapshot API and etcdutl's restore library.
type EtcdData interface {
	Backup(ctx context.Context, st *nodestate.NodeState, path string) (*etcddata.Backup, error)
	// CheckRestore checks everything Restore needs before etcd is stopped;
	// members is the cluster's member count the transaction read.
	CheckRestore(st *nodestate.NodeState, b *etcddata.Backup, asideDir string, members int) error
	Restore(ctx context.Context, st *nodestate.NodeState, b *etcddata.Backup, asideDir string, members int) error
	// Downgrade moves the running member's data back to minor target
	// with etcd's downgrade protocol (etcddata.Downgrade, which calls
	// enabling before and after it sends the enable).
	Downgrade(ctx context.Context, st *nodestate.NodeState, target string, timeout time.Duration, enabling func(sent bool) error) (etcddata.Downgraded, error)
	// CancelDowngrade cancels the member's cluster's downgrade to minor
	// target and reads it back (etcddata.CancelDowngrade): nil only when
	// none is enabled any longer.
	CancelDowngrade(ctx context.Context, st *nodestate.NodeState, target string) error
	// Revision is the running member's revision.
	Revision(ctx context.Context, st *nodestate.NodeState) (int64, error)
}

var (
	_ Manifests = (*manifest.Store)(nil)
	_ Processes = (*proc.Scanner)(nil)
)

type etcdData struct{}

func (etcdData) Backup(ctx context.Context, st *nodestate.NodeState, path string) (*etcddata.Backup, error) {
	return etcddata.Take(ctx, etcddata.Endpoint(st), path)
}

func (etcdData) CheckRestore(st *nodestate.NodeState, b *etcddata.Backup, asideDir string, members int) error {
	return etcddata.CheckRestore(st, b, asideDir, members)
}

func (etcdData) Restore(ctx context.Context, st *nodestate.NodeState, b *etcddata.Backup, asideDir string, members int) error {
	return etcddata.Restore(ctx, st, b, asideDir, members)
}

func (etcdData) Downgrade(ctx context.Context, st *nodestate.NodeState, target string, timeout time.Duration, enabling func(sent bool) error) (etcddata.Downgraded, error) {
	return etcddata.Downgrade(ctx, etcddata.Endpoint(st), target, timeout, enabling)
}

func (etcdData) CancelDowngrade(ctx context.Context, st *nodestate.NodeState, target string) error {
	return etcddata.CancelDowngrade(ctx, etcddata.Endpoint(st), target)
}

func (etcdData) Revision(ctx context.Context, st *nodestate.NodeState) (int64, error) {
	return etcddata.Revision(ctx, etcddata.Endpoint(st))
}

// hit is a fault point: fault.Hit (armed only in a stratumfault build),
// then the engine's own crash hook, which only the in-memory crash matrix
// sets (it stops the transaction there as a crash would).
func (e *Engine) hit(p fault.Point) {
	fault.Hit(p)
	if e.crash != nil {
		e.crash(p)
	}
}
