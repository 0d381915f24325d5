// Package engine runs an upgrade of a node's static pod manifests as a
// journaled transaction: snapshot the manifest set (and etcd's data when
// etcd's image changes), re-render the components in roster order waiting
// for kubelet to replace each process and for the new one to answer, verify
// the whole set through a soak window, then commit; or restore the snapshot
// and restart the components as they were.
//
// Every transition is journaled and fsynced before its action, and every
// action is idempotent given the journal, so a crash at any moment (kill -9,
// power loss, reboot) is recovered by Resume: it continues the open
// transaction from its last durable step, forwards or, once rolling back,
// backwards. See docs/architecture.md for the state machine.
package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// Deadlines bound every wait of a transaction. The defaults fit a real
// kubelet, where replacing a static pod takes 11-15 s (the pod worker holds
// the new pod back 10 s plus up to 50% jitter after the old one terminated)
// on top of the old pod's grace period (30 s at most for our pods).
type Deadlines struct {
	// Replace bounds the wait for kubelet to replace a component's process
	// after its manifest was written.
	Replace time.Duration
	// Active bounds the wait for the new process to answer its health
	// endpoint once it runs.
	Active time.Duration
	// Stop bounds the wait for a component to exit after its manifest was
	// removed (etcd before its data is restored).
	Stop time.Duration
	// Soak is how long every component must stay active, and none be
	// replaced again, before a transaction commits: it catches a crash loop
	// that a single health check misses.
	Soak time.Duration
	// EtcdBackup bounds the etcd snapshot before the upgrade.
	EtcdBackup time.Duration
	// EtcdSnapshot bounds the wait for etcd, restarted with
	// --snapshot-count=1, to take a snapshot that covers the WAL entries
	// the new etcd refuses (etcdsnap.go).
	EtcdSnapshot time.Duration
	// Release is how long a stopped component's pod is given, after its
	// last process exited, for kubelet to release the pod's name before
	// the new manifest is written, where kubelet's pod cgroups cannot be
	// watched (stop.go). Too short costs kubelet's 10-15 s hold of the new
	// pod, never correctness; too long is downtime.
	Release time.Duration
}

// DefaultDeadlines are the deadlines used where Config leaves one zero.
var DefaultDeadlines = Deadlines{
	Replace:    3 * time.Minute,
	Active:     3 * time.Minute,
	Stop:       90 * time.Second,
	Soak:       10 * time.Second,
	EtcdBackup: 2 * time.Minute,
	Release:    2500 * time.Millisecond,
	// etcd with --snapshot-count=1 snapshots after its second applied
	// entry, and it applies its own member publish at start.
	EtcdSnapshot: 2 * time.Minute,
}

func (d Deadlines) withDefaults() Deadlines {
	pick := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	return Deadlines{
		Replace:      pick(d.Replace, DefaultDeadlines.Replace),
		Active:       pick(d.Active, DefaultDeadlines.Active),
		Stop:         pick(d.Stop, DefaultDeadlines.Stop),
		Soak:         pick(d.Soak, DefaultDeadlines.Soak),
		EtcdBackup:   pick(d.EtcdBackup, DefaultDeadlines.EtcdBackup),
		Release:      pick(d.Release, DefaultDeadlines.Release),
		EtcdSnapshot: pick(d.EtcdSnapshot, DefaultDeadlines.EtcdSnapshot),
	}
}

// Config is what an Engine works on. Journal and Store are required.
type Config struct {
	Journal *journal.Journal
	Store   Manifests
	// Scanner observes the component processes (proc.Host()).
	Scanner Processes
	// Snapshots is where snapshots live (snapshot.DefaultRoot).
	Snapshots string
	// Keep is how many snapshots retention keeps (default 5); one that an
	// open transaction refers to is never deleted.
	Keep      int
	Deadlines Deadlines
	Etcd      EtcdData
	Log       *slog.Logger
	// Events, if set, receives a progress event for every step.
	Events func(Event)
	// Ended, if set, is called once a transaction's end (committed,
	// rolled back, rollback failed) is journaled, in the process that
	// journaled it. It must return at once: the command is still running.
	Ended func(End)
	// Coordination configures the rollout lock a node of a multi-member
	// etcd cluster takes (coordinate.go).
	Coordination Coordination
	// EtcdClient, if set, is how the node's own etcd member is reached
	// for its member list and the rollout lock; default etcddata.Endpoint
	// (tests reach a plain-http etcd through it).
	EtcdClient func(*nodestate.NodeState) etcddata.ClientConfig
	// Images configures the image pre-flight (images.go); its zero value
	// makes none.
	Images Images
	// APIServers, if set, reads every control-plane node's kube-apiserver
	// from the cluster's API server for the APIServerSkew check (the
	// CLI's is package kubeapi's). Nil: there is no API server to ask,
	// and the check has only the nodes' records in etcd.
	APIServers func(ctx context.Context) ([]LiveAPIServer, error)
	// Kubelet, if set, reads the version of this node's running kubelet
	// ("v1.34.4") from the cluster's API server (its Node's
	// status.nodeInfo.kubeletVersion) for the StaticPodKubelet check: that
	// kubelet reads each manifest as soon as it is written. Nil, or an
	// error: the check has only the target's kubelet, and the log says
	// so. UpgradeOptions.Kubelet, when set, is read instead.
	Kubelet func(ctx context.Context) (string, error)
	// NoSurge replaces every component stop-then-start: no surge copy is
	// started beside a running instance (surge.go).
	NoSurge bool
}

// Engine runs transactions. It is not safe for concurrent use; the journal's
// file lock keeps a second stratum-upgrade process out.
type Engine struct {
	j     *journal.Journal
	store Manifests
	procs Processes
	snaps *snapshot.Root
	dl    Deadlines
	etcd  EtcdData
	log   *slog.Logger
	emit  func(Event)
	onEnd func(End)
	// crash, when set (tests only), is called at every fault point.
	crash func(fault.Point)
	// noCgroupOnce says once that the pod cgroups cannot be watched.
	noCgroupOnce sync.Once
	images       Images
	// noRuntimeOnce says once that no container runtime answers.
	noRuntimeOnce sync.Once
	// runtime is the image runtime the last pre-flight reached (dialed), or
	// why it reached none; the checks before each stop reuse it.
	runtime dialedRuntime
	coord   Coordination
	// hold is the rollout lock while a transaction of a multi-member
	// cluster is driven (nil otherwise).
	hold *cluster.Hold
	// top is this node's topology while a transaction is driven, read
	// once for it (topology.go).
	top topology
	// etcdClient, when set, is how this node's etcd member is reached in
	// place of etcddata.Endpoint (Config.EtcdClient).
	etcdClient func(*nodestate.NodeState) etcddata.ClientConfig
	// etcdVersions, when set (tests only), is what a multi-member
	// rollback reads etcd's versions from instead of the cluster
	// (etcdback.go).
	etcdVersions func(ctx context.Context, st *nodestate.NodeState) (*cluster.Versions, error)
	// apiServers is Config.APIServers.
	apiServers func(ctx context.Context) ([]LiveAPIServer, error)
	// kubelet is Config.Kubelet.
	kubelet func(ctx context.Context) (string, error)
	// noSurge is Config.NoSurge.
	noSurge bool
}

// New returns an Engine for cfg.
func New(cfg Config) (*Engine, error) {
	if cfg.Journal == nil || cfg.Store == nil {
		return nil, errors.New("engine: Journal and Store are required")
	}
	e := &Engine{j: cfg.Journal, store: cfg.Store, procs: cfg.Scanner, dl: cfg.Deadlines.withDefaults(), etcd: cfg.Etcd, log: cfg.Log, emit: cfg.Events, onEnd: cfg.Ended, coord: cfg.Coordination, etcdClient: cfg.EtcdClient, images: cfg.Images, apiServers: cfg.APIServers, kubelet: cfg.Kubelet, noSurge: cfg.NoSurge}
	if e.procs == nil {
		s, ok := cfg.Store.(interface{ Scanner() *proc.Scanner })
		if !ok {
			return nil, errors.New("engine: Scanner is required with a Store that has none")
		}
		e.procs = s.Scanner()
	}
	if e.etcd == nil {
		e.etcd = etcdData{}
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.emit == nil {
		e.emit = func(Event) {}
	}
	root := cfg.Snapshots
	if root == "" {
		root = snapshot.DefaultRoot
	}
	keep := cfg.Keep
	if keep == 0 {
		keep = 5
	}
	e.snaps = snapshot.NewRoot(root, keep)
	return e, nil
}
