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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
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
}

// DefaultDeadlines are the deadlines used where Config leaves one zero.
var DefaultDeadlines = Deadlines{
	Replace:    3 * time.Minute,
	Active:     3 * time.Minute,
	Stop:       90 * time.Second,
	Soak:       10 * time.Second,
	EtcdBackup: 2 * time.Minute,
}

func (d Deadlines) withDefaults() Deadlines {
	pick := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	return Deadlines{
		Replace:    pick(d.Replace, DefaultDeadlines.Replace),
		Active:     pick(d.Active, DefaultDeadlines.Active),
		Stop:       pick(d.Stop, DefaultDeadlines.Stop),
		Soak:       pick(d.Soak, DefaultDeadlines.Soak),
		EtcdBackup: pick(d.EtcdBackup, DefaultDeadlines.EtcdBackup),
	}
}

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

// Config is what an Engine works on. Journal and Store are required.
type Config struct {
	Journal *journal.Journal
	Store   *manifest.Store
	// Scanner observes the component processes (proc.Host()).
	Scanner *proc.Scanner
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
}

// Engine runs transactions. It is not safe for concurrent use; the journal's
// file lock keeps a second stratum-upgrade process out.
type Engine struct {
	j     *journal.Journal
	store *manifest.Store
	procs *proc.Scanner
	snaps *snapshot.Root
	dl    Deadlines
	etcd  EtcdData
	log   *slog.Logger
	emit  func(Event)
}

// New returns an Engine for cfg.
func New(cfg Config) (*Engine, error) {
	if cfg.Journal == nil || cfg.Store == nil {
		return nil, errors.New("engine: Journal and Store are required")
	}
	e := &Engine{j: cfg.Journal, store: cfg.Store, procs: cfg.Scanner, dl: cfg.Deadlines.withDefaults(), etcd: cfg.Etcd, log: cfg.Log, emit: cfg.Events}
	if e.procs == nil {
		e.procs = cfg.Store.Scanner()
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

// Outcome is how a transaction ended.
type Outcome string

// Outcomes.
const (
	Committed      Outcome = "committed"
	RolledBack     Outcome = "rolled-back"
	RollbackFailed Outcome = "rollback-failed"
	// Nothing: there was no transaction to resume.
	Nothing Outcome = "nothing"
)

// Result is what a Run, Resume or Rollback did.
type Result struct {
	Txn     string        `json:"txn,omitempty"`
	Outcome Outcome       `json:"outcome"`
	Reason  string        `json:"reason,omitempty"`
	Changed []string      `json:"changed,omitempty"`
	Elapsed time.Duration `json:"elapsedNs"`
	// Steps is how long each component's step took, write to active.
	Steps []StepTime `json:"steps,omitempty"`
}

// StepTime is one component step's duration.
type StepTime struct {
	Component string        `json:"component"`
	Phase     string        `json:"phase"`
	Elapsed   time.Duration `json:"elapsedNs"`
}

// Errors a caller tells apart.
var (
	// ErrNothingToDo: the release changes no manifest of this node.
	ErrNothingToDo = errors.New("nothing to do")
	// ErrRolledBack: the upgrade failed and the node is back as it was.
	ErrRolledBack = errors.New("upgrade rolled back")
	// ErrRollbackFailed: the upgrade failed and so did its rollback; the
	// node needs an operator (Result.Reason and the journal say what).
	ErrRollbackFailed = errors.New("rollback failed")
	// ErrInterrupted: the context ended mid-transaction; it stays open in
	// the journal and `stratum-upgrade resume` continues it.
	ErrInterrupted = errors.New("interrupted")
)

// Plan computes what upgrading to rel would do, writing nothing.
func (e *Engine) Plan(rel *Release) (*Plan, error) {
	st, err := e.j.NodeState()
	if err != nil {
		return nil, err
	}
	return PlanUpgrade(e.store, st, rel)
}

// Run upgrades the node to rel as one transaction and returns when it has
// committed (nil error), rolled back (ErrRolledBack), failed to roll back
// (ErrRollbackFailed) or was interrupted by ctx (ErrInterrupted, the
// transaction left open for Resume). A second transaction while one is open
// is refused with journal.ErrTxnOpen and changes nothing; so is a release
// that changes nothing (ErrNothingToDo).
func (e *Engine) Run(ctx context.Context, rel *Release, raw []byte) (Result, error) {
	if open, err := e.j.OpenTxn(); err != nil {
		return Result{}, err
	} else if open != nil {
		return Result{}, openTxnError(open)
	}
	plan, err := e.Plan(rel)
	if err != nil {
		return Result{}, err
	}
	from, err := plan.From.Marshal()
	if err != nil {
		return Result{}, err
	}
	to, err := plan.To.Marshal()
	if err != nil {
		return Result{}, err
	}
	txn, err := e.j.Begin(journal.Txn{Kind: journal.KindUpgrade, From: from, To: to, Release: raw, Changed: plan.Changed()})
	if err != nil {
		return Result{}, err
	}
	e.event(txn.ID, journal.PhasePlanned, "begin", "", "", fmt.Sprintf("upgrade to %s: %s change", plan.To.KubernetesVersion, strings.Join(plan.Changed(), ", ")))
	fault.Hit(fault.AfterBegin)
	return e.drive(ctx, &txn)
}

func openTxnError(t *journal.Txn) error {
	return fmt.Errorf("%w: transaction %s (%s) is in phase %s; run `stratum-upgrade resume` to finish it, or `stratum-upgrade rollback` to undo it",
		journal.ErrTxnOpen, t.ID, t.Kind, t.Phase)
}

// Resume continues the open transaction from its last durable step:
// forwards while it was applying or verifying, backwards once it was rolling
// back. With no open transaction it does nothing (Outcome Nothing).
func (e *Engine) Resume(ctx context.Context) (Result, error) {
	txn, err := e.j.OpenTxn()
	if err != nil {
		return Result{}, err
	}
	if txn == nil {
		return Result{Outcome: Nothing}, nil
	}
	e.event(txn.ID, txn.Phase, "resume", "", "", "resuming transaction "+txn.ID+" in phase "+string(txn.Phase))
	return e.drive(ctx, txn)
}

// Rollback rolls back the open transaction, whatever its phase.
func (e *Engine) Rollback(ctx context.Context, reason string) (Result, error) {
	txn, err := e.j.OpenTxn()
	if err != nil {
		return Result{}, err
	}
	if txn == nil {
		return Result{Outcome: Nothing}, errors.New("no open transaction to roll back; use --last to roll back the last committed upgrade")
	}
	if txn.Phase != journal.PhaseRollingBack {
		if err := e.j.Update(txn.ID, func(t *journal.Txn) error {
			t.Phase, t.Reason = journal.PhaseRollingBack, reason
			return nil
		}); err != nil {
			return Result{}, err
		}
		txn.Phase, txn.Reason = journal.PhaseRollingBack, reason
	}
	return e.drive(ctx, txn)
}

// RollbackLast undoes the last committed upgrade: a new transaction (kind
// rollback-last) that puts back, component by component, the manifests of
// that upgrade's retained snapshot, with the same waits, verification and
// automatic rollback as an upgrade. etcd's data is not restored: after a
// commit it holds writes the snapshot does not.
func (e *Engine) RollbackLast(ctx context.Context) (Result, error) {
	if open, err := e.j.OpenTxn(); err != nil {
		return Result{}, err
	} else if open != nil {
		return Result{}, openTxnError(open)
	}
	hist, err := e.j.History(0)
	if err != nil {
		return Result{}, err
	}
	var last *journal.Txn
	for i := range hist {
		if hist[i].Phase == journal.PhaseCommitted {
			last = &hist[i]
			break
		}
	}
	if last == nil {
		return Result{}, errors.New("rollback --last: no committed upgrade in the journal")
	}
	if last.Kind == journal.KindRollbackLast {
		return Result{}, fmt.Errorf("rollback --last: the last committed transaction %s is itself a rollback; run an upgrade with a release instead", last.ID)
	}
	cur, err := e.j.NodeState()
	if err != nil {
		return Result{}, err
	}
	old, err := nodestate.Parse(last.From)
	if err != nil {
		return Result{}, fmt.Errorf("rollback --last: node state before %s: %w", last.ID, err)
	}
	snap, err := snapshot.Load(last.SnapshotDir, manifest.DerivedPaths(old))
	if err != nil {
		return Result{}, fmt.Errorf("rollback --last: the snapshot of %s is not usable (retention may have removed it): %w", last.ID, err)
	}
	plan, err := planFromSnapshot(e.store, cur, old, snap)
	if err != nil {
		return Result{}, err
	}
	from, _ := cur.Marshal()
	txn, err := e.j.Begin(journal.Txn{Kind: journal.KindRollbackLast, From: from, To: last.From, Source: last.SnapshotDir, Changed: plan.Changed()})
	if err != nil {
		return Result{}, err
	}
	e.event(txn.ID, journal.PhasePlanned, "begin", "", "", fmt.Sprintf("roll back %s: %s change", last.ID, strings.Join(plan.Changed(), ", ")))
	fault.Hit(fault.AfterBegin)
	return e.drive(ctx, &txn)
}

// run is the state of one transaction being driven.
type run struct {
	txn     *journal.Txn
	from    *nodestate.NodeState
	to      *nodestate.NodeState
	recs    []journal.Record
	started time.Time
	steps   []StepTime
}

func (e *Engine) load(txn *journal.Txn) (*run, error) {
	from, err := nodestate.Parse(txn.From)
	if err != nil {
		return nil, fmt.Errorf("transaction %s: node state before: %w", txn.ID, err)
	}
	to, err := nodestate.Parse(txn.To)
	if err != nil {
		return nil, fmt.Errorf("transaction %s: node state after: %w", txn.ID, err)
	}
	recs, err := e.j.Records(txn.ID)
	if err != nil {
		return nil, err
	}
	return &run{txn: txn, from: from, to: to, recs: recs, started: time.Now()}, nil
}

// drive moves the transaction through its phases until it ends or ctx does.
func (e *Engine) drive(ctx context.Context, txn *journal.Txn) (Result, error) {
	r, err := e.load(txn)
	if err != nil {
		return Result{Txn: txn.ID}, err
	}
	for {
		var stepErr error
		switch r.txn.Phase {
		case journal.PhasePlanned:
			stepErr = e.takeSnapshot(ctx, r)
		case journal.PhaseSnapshotted, journal.PhaseApplying:
			stepErr = e.apply(ctx, r)
		case journal.PhaseVerifying:
			stepErr = e.verify(ctx, r)
		case journal.PhaseRollingBack:
			return e.rollback(ctx, r)
		case journal.PhaseCommitted:
			e.prune()
			return r.result(Committed, ""), nil
		default:
			return r.result(Outcome(r.txn.Phase), r.txn.Reason), fmt.Errorf("transaction %s is in phase %s", r.txn.ID, r.txn.Phase)
		}
		if stepErr == nil {
			continue
		}
		if ctx.Err() != nil {
			return r.result("", ""), fmt.Errorf("%w: transaction %s left open in phase %s (%v); run `stratum-upgrade resume` to continue it", ErrInterrupted, r.txn.ID, r.txn.Phase, stepErr)
		}
		if errors.Is(stepErr, errFatalJournal) {
			return r.result("", ""), stepErr
		}
		e.log.Info("upgrade step failed; rolling back", "txn", r.txn.ID, "phase", r.txn.Phase, "err", stepErr)
		if err := e.setPhase(r, journal.PhaseRollingBack, stepErr.Error()); err != nil {
			return r.result("", ""), err
		}
		e.event(r.txn.ID, journal.PhaseRollingBack, "rollback", "", "", "rolling back: "+stepErr.Error())
		fault.Hit(fault.AfterRollingBack)
	}
}

// errFatalJournal marks a journal write that failed: the engine cannot go on
// (it must not act without the record) and cannot record a rollback either.
var errFatalJournal = errors.New("journal write failed")

func (r *run) result(o Outcome, reason string) Result {
	return Result{Txn: r.txn.ID, Outcome: o, Reason: reason, Changed: r.txn.Changed, Elapsed: time.Since(r.started), Steps: r.steps}
}

func (e *Engine) setPhase(r *run, p journal.Phase, reason string) error {
	err := e.j.Update(r.txn.ID, func(t *journal.Txn) error {
		t.Phase = p
		if reason != "" {
			t.Reason = reason
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errFatalJournal, err)
	}
	r.txn.Phase = p
	if reason != "" {
		r.txn.Reason = reason
	}
	return nil
}

// append journals recs, setting the phase, before the caller acts on them.
func (e *Engine) append(r *run, p journal.Phase, recs ...journal.Record) error {
	stored, err := e.j.Append(r.txn.ID, p, recs...)
	if err != nil {
		return fmt.Errorf("%w: %v", errFatalJournal, err)
	}
	r.recs = append(r.recs, stored...)
	r.txn.Phase = p
	return nil
}

// find returns the last record of phase p, step and component, if any.
func (r *run) find(p journal.Phase, step, component string) (journal.Record, bool) {
	for i := len(r.recs) - 1; i >= 0; i-- {
		rec := r.recs[i]
		if rec.Phase == p && rec.Step == step && rec.Component == component {
			return rec, true
		}
	}
	return journal.Record{}, false
}

func (e *Engine) event(txn string, p journal.Phase, step, comp, waiting, msg string) {
	ev := Event{Time: time.Now(), Txn: txn, Phase: string(p), Step: step, Component: comp, Waiting: waiting, Message: msg}
	e.log.Info(msg, "txn", txn, "phase", p, "step", step, "component", comp)
	e.emit(ev)
}

// Event is one progress report of a transaction.
type Event struct {
	Time      time.Time `json:"time"`
	Txn       string    `json:"txn"`
	Phase     string    `json:"phase"`
	Step      string    `json:"step"`
	Component string    `json:"component,omitempty"`
	// Waiting says what the engine now waits for, when it waits.
	Waiting string `json:"waitingFor,omitempty"`
	Message string `json:"message"`
}

// snapshotDir is where transaction id's manifest snapshot lives.
func (e *Engine) snapshotDir(id string) string { return e.snaps.Path(id) }

// takeSnapshot: planned -> snapshotted. The manifest set, and etcd's data
// when the upgrade changes etcd.
func (e *Engine) takeSnapshot(ctx context.Context, r *run) error {
	dir := r.txn.SnapshotDir
	if dir == "" {
		dir = e.snapshotDir(r.txn.ID)
	}
	e.event(r.txn.ID, r.txn.Phase, "snapshot", "", "", "snapshot of the manifest set to "+dir)
	if err := e.snaps.CleanStaging(r.txn.ID); err != nil {
		return err
	}
	if _, err := snapshot.Take(dir, e.store, manifest.DerivedPaths(r.from)); err != nil {
		if !errors.Is(err, snapshot.ErrExists) {
			return err
		}
		// Taken before a crash: a snapshot that exists is complete.
		if _, err := snapshot.Load(dir, manifest.DerivedPaths(r.from)); err != nil {
			return err
		}
	}
	fault.Hit(fault.AfterSnapshot)
	var backup []byte
	if r.txn.Kind == journal.KindUpgrade && contains(r.txn.Changed, nodestate.Etcd) {
		path := e.snaps.EtcdPath(r.txn.ID)
		e.event(r.txn.ID, r.txn.Phase, "etcd-backup", nodestate.Etcd, "etcd snapshot", "snapshot of etcd's data to "+path)
		bctx, cancel := context.WithTimeout(ctx, e.dl.EtcdBackup)
		b, err := e.etcd.Backup(bctx, r.from, path)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("etcd backup before changing etcd's image did not finish within %s (--etcd-backup-timeout): %w", e.dl.EtcdBackup, err)
			}
			return fmt.Errorf("etcd backup before changing etcd's image: %w", err)
		}
		if backup, err = json.Marshal(b); err != nil {
			return err
		}
		fault.Hit(fault.AfterEtcdBackup)
	}
	err := e.j.Update(r.txn.ID, func(t *journal.Txn) error {
		t.Phase, t.SnapshotDir, t.EtcdBackup = journal.PhaseSnapshotted, dir, backup
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errFatalJournal, err)
	}
	r.txn.Phase, r.txn.SnapshotDir, r.txn.EtcdBackup = journal.PhaseSnapshotted, dir, backup
	return nil
}

// Steps of the journal records.
const (
	stepMark    = "mark"
	stepDone    = "done"
	stepRestore = "restored"
	stepEtcd    = "etcd-restored"
	stepVerify  = "verified"
)

// apply: snapshotted/applying -> verifying. For each changed component in
// roster order: journal a mark, write its manifest, wait until kubelet
// replaced the process and the new one answers, journal the step done. The
// done record of one component and the mark of the next are one journal
// write (one fsync pair per step).
func (e *Engine) apply(ctx context.Context, r *run) error {
	var pending []journal.Record
	for _, comp := range r.txn.Changed {
		if _, done := r.find(journal.PhaseApplying, stepDone, comp); done {
			continue
		}
		mark, resumed := r.find(journal.PhaseApplying, stepMark, comp)
		if !resumed {
			m, err := e.procs.Mark()
			if err != nil {
				return fmt.Errorf("%s: %w", comp, err)
			}
			mark = journal.Record{Phase: journal.PhaseApplying, Step: stepMark, Component: comp, ProcMark: &m}
			if r.txn.Kind == journal.KindRollbackLast {
				// The retained snapshot's bytes would give the pod a UID
				// kubelet terminated in the upgrade; a fresh stamp does not.
				mark.Stamp = e.store.Stamp()
			}
			if err := e.append(r, journal.PhaseApplying, append(pending, mark)...); err != nil {
				return err
			}
			pending = nil
		}
		if err := e.step(ctx, r, journal.PhaseApplying, comp, *mark.ProcMark, mark.Stamp); err != nil {
			return err
		}
		ids, err := e.identity(r.to, comp)
		if err != nil {
			return err
		}
		pending = []journal.Record{{Phase: journal.PhaseApplying, Step: stepDone, Component: comp, Note: ids}}
		// The done record rides with the next write; a crash before it only
		// repeats this component's (idempotent) step.
		fault.Hit(fault.AfterStep.Of(comp))
	}
	if err := e.append(r, journal.PhaseVerifying, pending...); err != nil {
		return err
	}
	fault.Hit(fault.AfterApply)
	return nil
}

// step writes comp's target manifest and waits for kubelet to act on it.
func (e *Engine) step(ctx context.Context, r *run, p journal.Phase, comp string, m proc.Mark, stamp string) error {
	t0 := time.Now()
	st, at := r.to, fault.Step.Of
	if p == journal.PhaseRollingBack {
		st, at = r.from, fault.Step.InRollback
	}
	fault.Hit(at(fault.BeforeWrite, comp))
	if cur, err := e.procs.Mark(); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	} else if cur.BootID != m.BootID {
		// A mark from an earlier boot counts every process as new. That is
		// right when the write happened before the reboot (kubelet then
		// started the component from the new bytes), but when it did not,
		// the process kubelet restarted after the reboot runs the old
		// manifest: take a fresh mark in this boot before writing.
		on, err := e.targetOnDisk(r, p, comp, stamp)
		if err != nil {
			return fmt.Errorf("%s: %w", comp, err)
		}
		if !on {
			// kubelet may still be starting the old pod after the boot: a
			// process it starts between the new mark and the write would
			// pass for the replacement. Let it settle first.
			e.settle(ctx, st, comp)
			if m, err = e.procs.Mark(); err != nil {
				return fmt.Errorf("%s: %w", comp, err)
			}
			if err := e.append(r, p, journal.Record{Phase: p, Step: stepMark, Component: comp, ProcMark: &m, Stamp: stamp}); err != nil {
				return err
			}
		}
	}
	if err := e.procs.PastMark(ctx, m); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	if err := e.writeTarget(r, p, comp, stamp); err != nil {
		return err
	}
	e.event(r.txn.ID, p, "write", comp, "", "wrote "+comp+" manifest")
	fault.Hit(at(fault.AfterWrite, comp))
	t, err := manifest.Target(st, comp)
	if err != nil {
		return err
	}
	e.event(r.txn.ID, p, "wait-replaced", comp, "kubelet to replace "+comp, "waiting for kubelet to replace "+comp)
	if err := e.procs.WaitReplaced(ctx, t, m, e.dl.Replace); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	fault.Hit(at(fault.AfterReplaced, comp))
	e.event(r.txn.ID, p, "wait-active", comp, comp+" to answer "+describeHealth(t), "waiting for the new "+comp+" to answer")
	if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	r.steps = append(r.steps, StepTime{Component: comp, Phase: string(p), Elapsed: time.Since(t0)})
	e.event(r.txn.ID, p, "done", comp, "", fmt.Sprintf("%s replaced and active (%.1fs)", comp, time.Since(t0).Seconds()))
	return nil
}

func describeHealth(t proc.Target) string {
	if t.Health == "" {
		return "(no listener: running)"
	}
	return t.Health
}

// writeTarget writes the bytes comp's manifest must hold in phase p: in an
// upgrade the render of the new state; in a rollback-last the retained
// snapshot's bytes; in a rollback the restored bytes with the journaled
// restarted-at stamp.
func (e *Engine) writeTarget(r *run, p journal.Phase, comp, stamp string) error {
	switch {
	case p == journal.PhaseRollingBack:
		_, err := e.store.RestartAsIs(comp, stamp)
		return err
	case r.txn.Kind == journal.KindRollbackLast:
		snap, err := snapshot.Load(r.txn.Source, manifest.DerivedPaths(r.to))
		if err != nil {
			return err
		}
		b, ok := snap.Manifest(comp)
		if !ok {
			_, err := e.store.Remove(comp)
			return err
		}
		out, err := manifest.SetRestartedAt(b, stamp)
		if err != nil {
			return err
		}
		_, err = e.store.Put(comp, out)
		return err
	default:
		return e.store.Start(r.to, comp)
	}
}

// settle waits, bounded by the active deadline, until the process kubelet
// runs for comp from the manifest now on disk answers. It is called before a
// fresh mark is taken for a write that did not happen before a reboot: a
// mark only tells kubelet's processes apart by start time, so kubelet must
// not be starting one from the old manifest while the mark is taken. A
// component that does not come up is logged and the step goes on.
func (e *Engine) settle(ctx context.Context, st *nodestate.NodeState, comp string) {
	t, err := manifest.Target(st, comp)
	if err != nil {
		return
	}
	if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
		e.log.Warn("component did not come up on its old manifest after the reboot; writing the new one anyway", "component", comp, "err", err)
	}
}

// targetOnDisk reports whether comp's manifest on disk already holds what
// writeTarget would write in phase p.
func (e *Engine) targetOnDisk(r *run, p journal.Phase, comp, stamp string) (bool, error) {
	have, err := e.store.Read(comp)
	if errors.Is(err, manifest.ErrNoManifest) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	pod, err := manifest.DecodePod(have)
	if err != nil {
		return false, nil
	}
	var want []byte
	switch {
	case p == journal.PhaseRollingBack:
		return manifest.RestartedAt(pod) == stamp, nil
	case r.txn.Kind == journal.KindRollbackLast:
		snap, err := snapshot.Load(r.txn.Source, manifest.DerivedPaths(r.to))
		if err != nil {
			return false, err
		}
		b, ok := snap.Manifest(comp)
		if !ok {
			return false, nil
		}
		if want, err = manifest.SetRestartedAt(b, stamp); err != nil {
			return false, err
		}
	default:
		prof, err := manifest.LoadProfile(r.to)
		if err != nil {
			return false, err
		}
		if want, err = manifest.RenderBytes(r.to, prof, comp, manifest.RestartedAt(pod)); err != nil {
			return false, err
		}
	}
	return bytes.Equal(have, want), nil
}

// identity is the JSON of comp's current processes, journaled with its step
// so the soak can tell whether kubelet replaced it again.
func (e *Engine) identity(st *nodestate.NodeState, comp string) (string, error) {
	t, err := manifest.Target(st, comp)
	if err != nil {
		return "", err
	}
	ps, err := e.procs.PIDs(t.Binary)
	if err != nil {
		return "", fmt.Errorf("%s: %w", comp, err)
	}
	b, _ := json.Marshal(ps)
	return string(b), nil
}

// verify: verifying -> committed. Every roster component must be active and
// no changed component replaced again during the soak window.
func (e *Engine) verify(ctx context.Context, r *run) error {
	roster := manifest.NamesFor(r.to)
	e.event(r.txn.ID, r.txn.Phase, "verify", "", fmt.Sprintf("%s soak", e.dl.Soak), fmt.Sprintf("verifying every component for %s", e.dl.Soak))
	boot, err := e.procs.Mark()
	if err != nil {
		return err
	}
	// Every component must answer before the soak starts: after a crash or
	// a reboot, the ones this transaction did not touch may still be coming
	// up.
	for _, comp := range roster {
		t, err := manifest.Target(r.to, comp)
		if err != nil {
			return err
		}
		if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
			return fmt.Errorf("verify: %s: %w", comp, err)
		}
	}
	want := map[string]string{}
	for _, comp := range r.txn.Changed {
		rec, ok := r.find(journal.PhaseApplying, stepDone, comp)
		if ok && rec.BootID == boot.BootID {
			want[comp] = rec.Note
			continue
		}
		// The step was done in another boot: every process is new, so the
		// soak starts from the processes that run now.
		if want[comp], err = e.identity(r.to, comp); err != nil {
			return err
		}
	}
	if err := e.soak(ctx, r.to, roster, want); err != nil {
		return err
	}
	fault.Hit(fault.BeforeCommit)
	if err := e.j.Commit(r.txn.ID, r.to, journal.Record{Phase: journal.PhaseCommitted, Step: stepVerify}); err != nil {
		return fmt.Errorf("%w: %v", errFatalJournal, err)
	}
	r.txn.Phase = journal.PhaseCommitted
	e.event(r.txn.ID, journal.PhaseCommitted, "commit", "", "", "committed: node state is now "+r.to.KubernetesVersion)
	fault.Hit(fault.AfterCommit)
	return nil
}

// soak checks the roster repeatedly for the soak window: every component
// active (three failed checks in a row fail it: one slow answer is not a
// crash loop) and every component in want still the processes it names.
func (e *Engine) soak(ctx context.Context, st *nodestate.NodeState, roster []string, want map[string]string) error {
	targets := make([]proc.Target, len(roster))
	for i, comp := range roster {
		t, err := manifest.Target(st, comp)
		if err != nil {
			return err
		}
		targets[i] = t
	}
	misses := map[string]int{}
	deadline := time.Now().Add(e.dl.Soak)
	for {
		for i, comp := range roster {
			if w, ok := want[comp]; ok {
				now, err := e.identity(st, comp)
				if err != nil {
					return err
				}
				if now != w {
					return fmt.Errorf("%s was replaced during the %s soak window (processes %s, now %s): it is crash-looping or kubelet restarted it", comp, e.dl.Soak, w, now)
				}
			}
			if e.procs.Active(ctx, targets[i]) {
				misses[comp] = 0
			} else if misses[comp]++; misses[comp] >= 3 {
				return fmt.Errorf("%s stopped answering %s during the soak window", comp, describeHealth(targets[i]))
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rollback: rolling-back -> rolled-back or rollback-failed.
func (e *Engine) rollback(ctx context.Context, r *run) (Result, error) {
	reason := r.txn.Reason
	if err := e.rollbackSteps(ctx, r); err != nil {
		if errors.Is(err, errFatalJournal) || errors.Is(err, errResumable) || ctx.Err() != nil {
			return r.result("", reason), fmt.Errorf("%w: the rollback of %s is paused and stays open: %v; once the cause is fixed, `stratum-upgrade resume` continues it", ErrInterrupted, r.txn.ID, err)
		}
		detail := e.nodeReport(r)
		msg := fmt.Sprintf("%s; then the rollback failed: %v", reason, err)
		if ferr := e.j.Finish(r.txn.ID, journal.PhaseRollbackFailed, msg, detail); ferr != nil {
			return r.result("", msg), fmt.Errorf("rollback failed (%v) and could not be journaled (%v): the transaction is still open; `stratum-upgrade resume` retries the rollback", err, ferr)
		}
		e.event(r.txn.ID, journal.PhaseRollbackFailed, "rollback-failed", "", "", msg)
		return r.result(RollbackFailed, msg), fmt.Errorf("%w: %s. %s", ErrRollbackFailed, msg, e.rollbackFailedAdvice(r))
	}
	fault.Hit(fault.BeforeRolledBack)
	if err := e.j.Finish(r.txn.ID, journal.PhaseRolledBack, reason, nil); err != nil {
		return r.result("", reason), fmt.Errorf("the rollback is done but could not be journaled (%v): the transaction is still open; `stratum-upgrade resume` verifies it again and closes it", err)
	}
	r.txn.Phase = journal.PhaseRolledBack
	e.event(r.txn.ID, journal.PhaseRolledBack, "rolled-back", "", "", "rolled back: "+reason)
	e.prune()
	return r.result(RolledBack, reason), fmt.Errorf("%w: %s", ErrRolledBack, reason)
}

// rollbackFailedAdvice says what the operator should do after a failed
// rollback, for this transaction's situation.
func (e *Engine) rollbackFailedAdvice(r *run) string {
	adv := "The node state in the journal is still the one from before this transaction; `stratum-upgrade status` shows each component. Fix the cause, then run `stratum-upgrade render` to put every manifest back from it."
	data := filepath.Clean(r.from.Etcd.DataDir)
	aside := data + ".stratum-pre-rollback-" + r.txn.ID
	if _, err := os.Lstat(data); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(aside); err == nil {
			adv = fmt.Sprintf("etcd's data dir %s is missing and its data is at %s: move it back (or finish the restore from %s) BEFORE running `stratum-upgrade render`, or etcd starts as a new, empty cluster. ", data, aside, data+".stratum-restore") + adv
		}
	}
	return adv
}

// errResumable marks a rollback failure that leaves the node in a state a
// later resume can continue from (an etcd data restore that failed on I/O):
// the transaction stays open instead of ending rollback-failed.
var errResumable = errors.New("resumable")

// written is the components the transaction wrote (or may have written: a
// mark is journaled before the write), in roster order.
func (r *run) written() []string {
	var out []string
	for _, comp := range r.txn.Changed {
		if _, ok := r.find(journal.PhaseApplying, stepMark, comp); ok {
			out = append(out, comp)
		}
	}
	return out
}

// restartSet is the components the rollback restarts, in roster order:
// those the transaction wrote, and after a restore of etcd's data the whole
// control plane, whose caches hold revisions the restored data does not.
func (r *run) restartSet(written []string) []string {
	_, etcdRestored := r.find(journal.PhaseRollingBack, stepEtcd, nodestate.Etcd)
	var out []string
	for _, comp := range manifest.NamesFor(r.from) {
		switch {
		case contains(written, comp):
		case etcdRestored && (comp == nodestate.KubeAPIServer || comp == nodestate.ControllerManager || comp == nodestate.Scheduler):
		default:
			continue
		}
		out = append(out, comp)
	}
	for _, comp := range written {
		if !contains(out, comp) {
			out = append(out, comp) // added by the upgrade: the restore removes it
		}
	}
	return out
}

func (e *Engine) rollbackSteps(ctx context.Context, r *run) error {
	written := r.written()
	if r.txn.SnapshotDir == "" {
		// Failed before the snapshot: nothing was written.
		if len(written) > 0 {
			return errors.New("journal has manifest writes but no snapshot")
		}
		e.snaps.CleanStaging(r.txn.ID)
		return nil
	}
	derived := manifest.DerivedPaths(r.from)
	// The whole snapshot is validated before anything moves, etcd included.
	snap, err := snapshot.Load(r.txn.SnapshotDir, derived)
	if err != nil {
		return err
	}
	_, restored := r.find(journal.PhaseRollingBack, stepRestore, "")
	if !restored {
		if err := e.restoreEtcd(ctx, r, written, snap); err != nil {
			return err
		}
	}
	restart := r.restartSet(written)
	// Every restart's mark and restarted-at stamp is journaled before the
	// restore writes them, so the restore writes each manifest once, with
	// its stamp (a fresh pod UID), and every process started from that
	// write counts as after its mark.
	var marks []journal.Record
	var last proc.Mark
	for _, comp := range restart {
		if _, held := snap.Manifest(comp); !held {
			continue
		}
		m, err := e.procs.Mark()
		if err != nil {
			return err
		}
		stamp := e.store.Stamp()
		if rec, ok := r.find(journal.PhaseRollingBack, stepMark, comp); ok {
			// Journaled before a crash. Its mark stands unless it is from an
			// earlier boot and the restore has not written yet: then the
			// processes kubelet restarted after the reboot run the bytes
			// being replaced, and an old-boot mark would count them as new.
			if restored || rec.ProcMark.BootID == m.BootID {
				last = *rec.ProcMark
				continue
			}
			stamp = rec.Stamp
			e.settle(ctx, r.to, comp)
			if m, err = e.procs.Mark(); err != nil {
				return err
			}
		}
		last = m
		marks = append(marks, journal.Record{Phase: journal.PhaseRollingBack, Step: stepMark, Component: comp, ProcMark: &m, Stamp: stamp})
	}
	if len(marks) > 0 {
		if err := e.append(r, journal.PhaseRollingBack, marks...); err != nil {
			return err
		}
	}
	if !restored {
		stamps := map[string]string{}
		for _, comp := range restart {
			if rec, ok := r.find(journal.PhaseRollingBack, stepMark, comp); ok {
				stamps[comp] = rec.Stamp
			}
		}
		if err := e.procs.PastMark(ctx, last); err != nil {
			return err
		}
		e.event(r.txn.ID, r.txn.Phase, "restore", "", "", "restoring the manifest snapshot "+r.txn.SnapshotDir)
		res, err := snapshot.RestoreStamped(r.txn.SnapshotDir, e.store, derived, stamps)
		if err != nil {
			return err
		}
		if len(res.Strays) > 0 {
			e.log.Warn("snapshot holds files that were not restored", "strays", res.Strays)
		}
		fault.Hit(fault.AfterRestore)
		if err := e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: stepRestore}); err != nil {
			return err
		}
	}
	for _, comp := range restart {
		if _, done := r.find(journal.PhaseRollingBack, stepDone, comp); done {
			continue
		}
		if _, held := snap.Manifest(comp); !held {
			// The upgrade added it; the restore removed it. Wait for it to go.
			t, err := manifest.Target(r.to, comp)
			if err != nil {
				return err
			}
			if err := e.procs.WaitGone(ctx, t, e.dl.Stop); err != nil {
				return fmt.Errorf("%s: %w", comp, err)
			}
			if err := e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: stepDone, Component: comp}); err != nil {
				return err
			}
			continue
		}
		mark, _ := r.find(journal.PhaseRollingBack, stepMark, comp)
		// The restore wrote the stamped bytes already; the step's write is
		// a no-op unless a crash came between the restore and its record.
		if err := e.step(ctx, r, journal.PhaseRollingBack, comp, *mark.ProcMark, mark.Stamp); err != nil {
			return err
		}
		ids, err := e.identity(r.from, comp)
		if err != nil {
			return err
		}
		fault.Hit(fault.AfterStep.InRollback(comp))
		if err := e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: stepDone, Component: comp, Note: ids}); err != nil {
			return err
		}
	}
	// The rollback is verified like an upgrade: every component of the old
	// roster answers, then none is replaced again during the soak.
	roster := manifest.NamesFor(r.from)
	for _, comp := range roster {
		t, err := manifest.Target(r.from, comp)
		if err != nil {
			return err
		}
		if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
			return fmt.Errorf("after rollback, %s: %w", comp, err)
		}
	}
	want := map[string]string{}
	for _, comp := range roster {
		if want[comp], err = e.identity(r.from, comp); err != nil {
			return err
		}
	}
	e.event(r.txn.ID, r.txn.Phase, "verify", "", fmt.Sprintf("%s soak", e.dl.Soak), fmt.Sprintf("verifying the rolled-back components for %s", e.dl.Soak))
	return e.soak(ctx, r.from, roster, want)
}

// restoreEtcd puts etcd's data back when the upgrade had rewritten etcd's
// manifest, for a single-member cluster: stop etcd, restore the backup into
// its data dir (the data it wrote is moved aside, not deleted). In a
// multi-member cluster the other members hold the data; only the manifest
// is rolled back. Everything that can be checked is checked before etcd is
// stopped; a restore that fails after the stop leaves the transaction open
// (errResumable) for resume to finish.
func (e *Engine) restoreEtcd(ctx context.Context, r *run, written []string, snap *snapshot.Loaded) error {
	if !contains(written, nodestate.Etcd) || len(r.txn.EtcdBackup) == 0 {
		return nil
	}
	if _, done := r.find(journal.PhaseRollingBack, stepEtcd, nodestate.Etcd); done {
		return nil
	}
	if !r.from.SingleMember() {
		e.log.Warn("etcd is a multi-member cluster: its data is not restored, only its manifest; the other members hold the data")
		return nil
	}
	// A mark is journaled before the write: if the manifest on disk is
	// still the snapshot's, the new etcd never ran and its data is the
	// backup's plus what the old etcd wrote since. Keep it.
	if b, err := e.store.Read(nodestate.Etcd); err == nil && sameModuloStamp(snap, nodestate.Etcd, b) {
		e.log.Info("etcd's manifest was never rewritten: its data is not restored")
		return nil
	}
	var b etcddata.Backup
	if err := json.Unmarshal(r.txn.EtcdBackup, &b); err != nil {
		return fmt.Errorf("journaled etcd backup: %w", err)
	}
	aside := r.from.Etcd.DataDir + ".stratum-pre-rollback-" + r.txn.ID
	if err := etcddata.CheckRestore(r.from, &b, aside); err != nil {
		return fmt.Errorf("etcd's data cannot be restored, so etcd was left running: %w", err)
	}
	e.event(r.txn.ID, r.txn.Phase, "etcd-stop", nodestate.Etcd, "etcd to exit", "stopping etcd to restore its data")
	if err := e.store.Stop(ctx, r.from, nodestate.Etcd, e.dl.Stop); err != nil {
		return err
	}
	fault.Hit(fault.AfterEtcdStop)
	e.event(r.txn.ID, r.txn.Phase, "etcd-restore", nodestate.Etcd, "", fmt.Sprintf("restoring etcd data from %s (revision %d); the data it replaces is kept at %s", b.Path, b.Revision, aside))
	if err := e.etcd.Restore(ctx, r.from, &b, aside); err != nil {
		return fmt.Errorf("%w: etcd is stopped and its data restore failed: %v", errResumable, err)
	}
	fault.Hit(fault.AfterEtcdRestore)
	return e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: stepEtcd, Component: nodestate.Etcd, Note: aside})
}

// ComponentReport is one component's state, journaled when a rollback fails.
type ComponentReport struct {
	Component string `json:"component"`
	// Manifest is "snapshot" (the snapshot's bytes but for restarted-at),
	// "missing", "unreadable" or "other".
	Manifest  string         `json:"manifest"`
	Processes []proc.Process `json:"processes"`
	Active    bool           `json:"active"`
	Error     string         `json:"error,omitempty"`
}

// nodeReport is every component's exact state, for the operator.
func (e *Engine) nodeReport(r *run) []byte {
	snap, _ := snapshot.Load(r.txn.SnapshotDir, manifest.DerivedPaths(r.from))
	var out []ComponentReport
	for _, comp := range manifest.Names {
		rep := ComponentReport{Component: comp}
		b, err := e.store.Read(comp)
		switch {
		case errors.Is(err, manifest.ErrNoManifest):
			rep.Manifest = "missing"
		case err != nil:
			rep.Manifest, rep.Error = "unreadable", err.Error()
		case snap != nil && sameModuloStamp(snap, comp, b):
			rep.Manifest = "snapshot"
		default:
			rep.Manifest = "other"
		}
		st := r.from
		if !contains(manifest.NamesFor(st), comp) {
			st = r.to
		}
		if t, err := manifest.Target(st, comp); err == nil {
			rep.Processes, _ = e.procs.PIDs(t.Binary)
			rep.Active = e.procs.Active(context.Background(), t)
		}
		if rep.Manifest == "missing" && len(rep.Processes) == 0 && !contains(manifest.NamesFor(r.from), comp) {
			continue
		}
		out = append(out, rep)
	}
	b, _ := json.Marshal(out)
	return b
}

// sameModuloStamp reports whether b is the snapshot's manifest of comp but
// for the restarted-at annotation a rollback bumps.
func sameModuloStamp(snap *snapshot.Loaded, comp string, b []byte) bool {
	want, ok := snap.Manifest(comp)
	if !ok {
		return false
	}
	got, err := manifest.SetRestartedAt(b, "")
	if err != nil {
		return false
	}
	exp, err := manifest.SetRestartedAt(want, "")
	if err != nil {
		return false
	}
	return string(got) == string(exp)
}

// prune applies snapshot retention; failures are logged, never fatal.
func (e *Engine) prune() {
	keepIDs := map[string]bool{}
	if open, err := e.j.OpenTxn(); err == nil && open != nil {
		keepIDs[open.ID] = true
	}
	// `rollback --last` needs the newest committed upgrade's snapshot, however
	// many failed attempts came after it.
	if hist, err := e.j.History(0); err == nil {
		for _, t := range hist {
			if t.Phase == journal.PhaseCommitted && t.Kind == journal.KindUpgrade {
				keepIDs[filepath.Base(t.SnapshotDir)] = true
				break
			}
		}
	}
	removed, err := e.snaps.Prune(keepIDs)
	if err != nil {
		e.log.Warn("snapshot retention", "err", err)
	}
	for _, r := range removed {
		e.log.Info("snapshot removed by retention", "snapshot", r)
	}
}
