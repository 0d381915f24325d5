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
	// Unreachable is how long Acquire retries while the cluster's etcd
	// does not answer (a member restarting, an election) before it gives
	// up with ErrUnreachable; default 1 minute.
	Unreachable time.Duration
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
	// members is the member list Connect read.
	members Members
}

// Connect reaches the node's own member, reads the member list and returns
// a Coordinator whose client uses every member's client URL. The caller
// closes it. When no endpoint accepts a connection at all, it fails at
// once (ErrUnreachable).
func Connect(ctx context.Context, cfg Config) (*Coordinator, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = 15 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Minute
	}
	if cfg.Unreachable <= 0 {
		cfg.Unreachable = time.Minute
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
	if !anyAccepts(eps, min(dial, time.Second)) {
		return nil, fmt.Errorf("%w: nothing accepts a connection at %s; check that this node's etcd runs (its container log)", ErrUnreachable, strings.Join(eps, ", "))
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
	members := Members{Count: len(ml.Members), At: time.Now().UTC()}
	for _, m := range ml.Members {
		for _, u := range m.ClientURLs {
			if !slices.Contains(eps, u) {
				eps = append(eps, u)
			}
		}
	}
	cli.SetEndpoints(eps...)
	return &Coordinator{cfg: cfg, cli: cli, members: members}, nil
}

// Members is the member list Connect read: whether this node is one of
// several members is decided from it, never from --initial-cluster.
func (c *Coordinator) Members() Members { return c.members }

// Endpoints is every member's client URL, the node's own first: what
// Config.Known takes next time.
func (c *Coordinator) Endpoints() []string { return c.cli.Endpoints() }

// Client is the coordinator's etcd client (every member's endpoint).
func (c *Coordinator) Client() *clientv3.Client { return c.cli }

// Close closes the client; a Hold not released loses its lock when its
// lease expires.
func (c *Coordinator) Close() error { return c.cli.Close() }

// Acquire takes the rollout lock for a transaction of kind and returns it
// held. While another node holds the lock, or has a transaction open (it
// owns the rollout even when its lease has expired: it crashed or was cut
// off, and its resume will end it), Acquire waits, telling Config.Waiting
// whom it waits for, up to Config.Wait in all; then it fails with
// ErrLockTimeout or a *BusyError naming that node. A halted rollout is
// refused at once (*HaltedError). resume names the node's own open
// transaction when it is resumed or rolled back: then neither a halt nor
// another open node refuses it (it already owned the rollout when it
// began), and only the lock is taken. The Hold keeps the lock until
// Release; its lease is kept alive in the background and lost TTL after
// this process stops or is cut off.
func (c *Coordinator) Acquire(ctx context.Context, kind, resume string) (*Hold, error) {
	return c.AcquireEtcdDown(ctx, kind, resume, "")
}

// AcquireEtcdDown is Acquire for a transaction that moves this node's etcd
// down to minor etcdDownTo ("3.6"; "" when it does not). While etcd reports
// a downgrade to that minor enabled, a halt lets such a rollback --last
// (kind KindRollbackLast) through: it is how each member still on the
// newer minor goes back after a rollback past the cluster version
// enabled the downgrade. Another node's open transaction still makes it
// wait, as any.
func (c *Coordinator) AcquireEtcdDown(ctx context.Context, kind, resume, etcdDownTo string) (*Hold, error) {
	deadline := time.Now().Add(c.cfg.Wait)
	told := ""
	var last *BusyError
	var unreachable time.Time
	for {
		h, err := c.acquireOnce(ctx, kind, resume, etcdDownTo, deadline)
		var busy *BusyError
		if errors.Is(err, ErrLockTimeout) && last != nil {
			// The wait ran out while the lock changed hands: what it
			// waited for is the open transaction.
			return nil, fmt.Errorf("%w (waited %s)", last, c.cfg.Wait)
		}
		if errors.Is(err, ErrUnreachable) && ctx.Err() == nil {
			// A member restarting (another node's etcd step) or a leader
			// election fails a request now and then: retry, but give up
			// on a cluster that stays unreachable.
			if unreachable.IsZero() {
				unreachable = time.Now()
			}
			if time.Since(unreachable) >= c.cfg.Unreachable || time.Now().After(deadline) {
				return nil, fmt.Errorf("%w (for %s)", err, time.Since(unreachable).Round(time.Second))
			}
			c.cfg.Log.Warn("the cluster's etcd did not answer; retrying", "err", err)
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(time.Second):
			}
			continue
		}
		unreachable = time.Time{}
		if !errors.As(err, &busy) {
			return h, err
		}
		last = busy
		p := busy.Progress
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (waited %s)", err, c.cfg.Wait)
		}
		if told != p.Node+"/"+p.Txn {
			told = p.Node + "/" + p.Txn
			c.cfg.Log.Info("waiting for another node's open transaction to end", "node", p.Node, "txn", p.Txn, "phase", p.Phase)
			if c.cfg.Waiting != nil {
				c.cfg.Waiting(Holder{Node: p.Node, Kind: p.Kind, Since: p.Started})
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for node %s's transaction %s to end: %w", p.Node, p.Txn, ctx.Err())
		case <-time.After(min(time.Second, time.Until(deadline)+time.Millisecond)):
		}
	}
}

// acquireOnce takes the lock (waiting until deadline) and checks under it.
func (c *Coordinator) acquireOnce(ctx context.Context, kind, resume, etcdDownTo string, deadline time.Time) (*Hold, error) {
	ttl := int64((c.cfg.TTL + time.Second - 1) / time.Second)
	gctx, cancel := context.WithTimeout(ctx, writeTimeout)
	lease, err := c.cli.Grant(gctx, ttl)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: lease for the rollout lock: %v", ErrUnreachable, err)
	}
	s, err := concurrency.NewSession(c.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(ttl)))
	if err != nil {
		return nil, fmt.Errorf("%w: lease for the rollout lock: %v", ErrUnreachable, err)
	}
	m := concurrency.NewMutex(s, lockPrefix)
	if err := c.lock(ctx, m, deadline); err != nil {
		s.Close()
		return nil, err
	}
	h := &Hold{c: c, s: s, m: m}
	if err := h.check(ctx, kind, resume, etcdDownTo); err != nil {
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

// lock waits for the mutex until deadline, telling Waiting who holds it.
func (c *Coordinator) lock(ctx context.Context, m *concurrency.Mutex, deadline time.Time) error {
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// One try, bounded like any single request: a cluster without quorum
	// must not hold it for the whole wait.
	try, cancelTry := context.WithTimeout(tctx, writeTimeout)
	err := m.TryLock(try)
	cancelTry()
	switch {
	case err == nil:
		return nil
	case ctx.Err() == nil && tctx.Err() != nil:
		return fmt.Errorf("%w: the wait of %s ran out", ErrLockTimeout, c.cfg.Wait)
	case !errors.Is(err, concurrency.ErrLocked):
		return fmt.Errorf("%w: rollout lock: %v", ErrUnreachable, err)
	}
	h, _ := c.holder(tctx)
	c.cfg.Log.Info("waiting for the rollout lock", "holder", h.Node, "kind", h.Kind, "since", h.Since)
	if c.cfg.Waiting != nil {
		c.cfg.Waiting(h)
	}
	if err := m.Lock(tctx); err != nil {
		if ctx.Err() == nil && tctx.Err() != nil {
			return fmt.Errorf("%w: node %s held it for all of %s; it is still changing, or it died and its lease has not expired", ErrLockTimeout, orUnknown(h.Node), c.cfg.Wait)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("rollout lock (held by node %s): %w", orUnknown(h.Node), err)
		}
		return fmt.Errorf("%w: waiting for the rollout lock held by node %s: %v", ErrUnreachable, orUnknown(h.Node), err)
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
