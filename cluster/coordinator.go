package cluster

// The coordinator: a client of the whole cluster, the lock, and the
// checks a node makes before it begins a transaction.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/etcddata"
)

// Config is how a node reaches its cluster and how long it waits.
type Config struct {
	// Local is the node's own member (etcddata.Endpoint): the member list
	// is read from it, and then every member's client URL is used, so that
	// the coordination survives this node's etcd being replaced.
	Local etcddata.ClientConfig
	// Known are client URLs of the cluster's members from an earlier
	// Connect (Coordinator.Endpoints): tried when the local member does not
	// answer, as after a crash while this node's etcd was being replaced.
	Known []string
	// Node is this node's name, as in its Progress key.
	Node string
	// TTL is the lock's lease: a node that dies (or is cut off) loses the
	// lock this long after its last keep-alive; default 15 s.
	TTL time.Duration
	// Wait bounds the wait for another node's lock; default 30 minutes
	// (another node's whole transaction, soak included).
	Wait time.Duration
	// Waiting, if set, is told once who holds the lock it waits for.
	Waiting func(h Holder)
	Log     *slog.Logger
}

// Errors a caller tells apart. Each comes wrapped in a typed error that
// says which node and what to do.
var (
	// ErrHalted: a node's transaction ended rolled back or rollback-failed
	// and the rollout is halted until ClearHalt.
	ErrHalted = errors.New("the rollout is halted")
	// ErrBusy: another node has a transaction open.
	ErrBusy = errors.New("another node has a transaction open")
	// ErrLockTimeout: the lock was not free within Config.Wait.
	ErrLockTimeout = errors.New("timed out waiting for the rollout lock")
	// ErrUnreachable: the cluster's etcd did not answer.
	ErrUnreachable = errors.New("the cluster's etcd cannot be reached")
)

// HaltedError is ErrHalted with the halt.
type HaltedError struct{ Halt Halt }

func (e *HaltedError) Error() string {
	return fmt.Sprintf("the rollout is halted: transaction %s on node %s ended %s at %s (%s); no node begins a transaction until an operator has looked at %s and run `stratum-upgrade clear-halt`",
		e.Halt.Txn, e.Halt.Node, e.Halt.Outcome, e.Halt.At.UTC().Format(time.RFC3339), orNone(e.Halt.Reason), e.Halt.Node)
}
func (e *HaltedError) Unwrap() error { return ErrHalted }

// BusyError is ErrBusy with the node that owns the rollout.
type BusyError struct{ Progress Progress }

func (e *BusyError) Error() string {
	p := e.Progress
	return fmt.Sprintf("node %s has transaction %s (%s) open in phase %s since %s: it owns the rollout until it ends; if that node crashed, run `stratum-upgrade resume` on %s",
		p.Node, p.Txn, p.Kind, p.Phase, p.Started.UTC().Format(time.RFC3339), p.Node)
}
func (e *BusyError) Unwrap() error { return ErrBusy }

func orNone(s string) string {
	if s == "" {
		return "no reason recorded"
	}
	return s
}

// Coordinator is a node's client of its cluster's coordination keys.
type Coordinator struct {
	cfg Config
	cli *clientv3.Client
}

// Connect reaches the node's own member, reads the member list and returns
// a Coordinator whose client uses every member's client URL. The caller
// closes it.
func Connect(ctx context.Context, cfg Config) (*Coordinator, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	tlsCfg, err := cfg.Local.TLS()
	if err != nil {
		return nil, fmt.Errorf("coordination through etcd: %w", err)
	}
	dial := cfg.Local.DialTimeout
	if dial <= 0 {
		dial = etcddata.DefaultDialTimeout
	}
	eps := []string{cfg.Local.Endpoint}
	for _, u := range cfg.Known {
		if !slices.Contains(eps, u) {
			eps = append(eps, u)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsCfg, DialTimeout: dial, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, strings.Join(eps, ", "), err)
	}
	lctx, cancel := context.WithTimeout(ctx, dial)
	defer cancel()
	// WithRequireLeader: a member cut off from the others answers nothing
	// rather than its stale list.
	ml, err := cli.MemberList(clientv3.WithRequireLeader(lctx))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w: member list from %s: %v; check that this node's etcd runs and the cluster has quorum (etcdctl endpoint health --cluster)", ErrUnreachable, strings.Join(eps, ", "), err)
	}
	for _, m := range ml.Members {
		for _, u := range m.ClientURLs {
			if !slices.Contains(eps, u) {
				eps = append(eps, u)
			}
		}
	}
	cli.SetEndpoints(eps...)
	return &Coordinator{cfg: cfg, cli: cli}, nil
}

// Endpoints is every member's client URL, the node's own first: what
// Config.Known takes next time.
func (c *Coordinator) Endpoints() []string { return c.cli.Endpoints() }

// Client is the coordinator's etcd client (every member's endpoint).
func (c *Coordinator) Client() *clientv3.Client { return c.cli }

// Close closes the client; a Hold not released loses its lock when its
// lease expires.
func (c *Coordinator) Close() error { return c.cli.Close() }

// Acquire takes the rollout lock for a transaction of kind, waiting up to
// Config.Wait while another node holds it, then refuses (releasing it)
// when the rollout is halted or another node has a transaction open.
// resume names the node's own open transaction when it is resumed or
// rolled back: then a halt or another open node does not refuse it (the
// node already owned the rollout when it began), and only the lock is
// taken. The Hold keeps the lock until Release; its lease is kept alive in
// the background, and lost TTL after this process stops or is cut off.
func (c *Coordinator) Acquire(ctx context.Context, kind, resume string) (*Hold, error) {
	s, err := concurrency.NewSession(c.cli, concurrency.WithTTL(int((c.cfg.TTL+time.Second-1)/time.Second)))
	if err != nil {
		return nil, fmt.Errorf("%w: lease for the rollout lock: %v", ErrUnreachable, err)
	}
	m := concurrency.NewMutex(s, lockPrefix)
	if err := c.lock(ctx, m); err != nil {
		s.Close()
		return nil, err
	}
	h := &Hold{c: c, s: s, m: m}
	if err := h.check(ctx, resume); err != nil {
		h.Release()
		return nil, err
	}
	holder, err := encode(Holder{Node: c.cfg.Node, Kind: kind, Since: time.Now().UTC()})
	if err != nil {
		h.Release()
		return nil, err
	}
	if err := h.put(ctx, holderKey, holder, clientv3.WithLease(s.Lease())); err != nil {
		h.Release()
		return nil, err
	}
	return h, nil
}

// lock waits for the mutex, telling Waiting who holds it.
func (c *Coordinator) lock(ctx context.Context, m *concurrency.Mutex) error {
	tctx, cancel := context.WithTimeout(ctx, c.cfg.Wait)
	defer cancel()
	if err := m.TryLock(tctx); err == nil {
		return nil
	} else if !errors.Is(err, concurrency.ErrLocked) {
		return fmt.Errorf("%w: rollout lock: %v", ErrUnreachable, err)
	}
	h, _ := c.holder(tctx)
	c.cfg.Log.Info("waiting for the rollout lock", "holder", h.Node, "kind", h.Kind, "since", h.Since)
	if c.cfg.Waiting != nil {
		c.cfg.Waiting(h)
	}
	if err := m.Lock(tctx); err != nil {
		if ctx.Err() == nil && tctx.Err() != nil {
			return fmt.Errorf("%w: node %s held it for all of %s; it is still upgrading, or it died and its lease has not expired", ErrLockTimeout, orUnknown(h.Node), c.cfg.Wait)
		}
		return fmt.Errorf("rollout lock (held by node %s): %w", orUnknown(h.Node), err)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// holder is the lock holder as it recorded itself (zero when none).
func (c *Coordinator) holder(ctx context.Context) (Holder, error) {
	r, err := c.cli.Get(ctx, holderKey)
	if err != nil || len(r.Kvs) == 0 {
		return Holder{}, err
	}
	return decode[Holder](holderKey, r.Kvs[0].Value)
}

// ClearHalt removes the halt and returns it (nil when there was none).
func (c *Coordinator) ClearHalt(ctx context.Context) (*Halt, error) {
	r, err := c.cli.Delete(ctx, haltKey, clientv3.WithPrevKV())
	if err != nil {
		return nil, fmt.Errorf("%w: clear the halt: %v", ErrUnreachable, err)
	}
	if len(r.PrevKvs) == 0 {
		return nil, nil
	}
	h, err := decode[Halt](haltKey, r.PrevKvs[0].Value)
	if err != nil {
		// Cleared all the same: it was not one this package wrote.
		return &Halt{Reason: strings.TrimSpace(err.Error())}, nil
	}
	return &h, nil
}
