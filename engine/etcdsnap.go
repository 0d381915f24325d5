package engine

// The remediation of a WAL history the new etcd refuses (EtcdWALHistory):
// before etcd's own step, the same etcd is restarted with
// --snapshot-count=1 until a new raft snapshot covers the WAL tail, so
// that the new etcd never replays the entries it refuses.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// etcdSnapshotPoll is how often that wait re-scans the WAL.
const etcdSnapshotPoll = 250 * time.Millisecond

// walHazards scans etcd's WAL for the entries the new minor refuses. The
// result is empty when etcd does not move to another minor or has no
// WAL yet.
func walHazards(r *run) (string, []etcddata.Hazard, error) {
	_, minor, moves := etcdMinors(r)
	if !moves {
		return minor, nil, nil
	}
	if !hasWAL(r.from.Etcd.DataDir) {
		return minor, nil, nil
	}
	scan, err := etcddata.ScanWAL(r.from.Etcd.DataDir)
	if err != nil {
		return minor, nil, err
	}
	return minor, scan.Hazards(minor), nil
}

// hasWAL reports whether etcd ran on dataDir (it holds a WAL directory).
func hasWAL(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, "member", "wal"))
	return err == nil
}

// snapshotState is etcd's node state of the remediation: the node's own,
// with --snapshot-count=1.
func snapshotState(from *nodestate.NodeState) *nodestate.NodeState {
	st := from.Clone()
	if st.ExtraArgs == nil {
		st.ExtraArgs = map[string]map[string]nodestate.ArgValues{}
	}
	args := map[string]nodestate.ArgValues{}
	for k, v := range st.ExtraArgs[nodestate.Etcd] {
		args[k] = v
	}
	args["snapshot-count"] = nodestate.ArgValues{"1"}
	st.ExtraArgs[nodestate.Etcd] = args
	return st
}

// forceEtcdSnapshot is the first journaled step of an upgrade that moves
// etcd to a minor refusing entries of its WAL history: etcd's manifest is
// rewritten with --snapshot-count=1 (journaled first, as any step's mark),
// the same etcd is waited for as a restart waits for it, and then the WAL
// is re-scanned until no hazard is left (journaled "covered"). etcd's own
// flags come back with etcd's own step, which is the next write (etcd is
// first in the roster); a rollback before it puts etcd's manifest back
// from the snapshot and keeps the data (only the same etcd ran on it).
// Decided from the WAL on disk, so a resumed transaction remediates what
// is still there; with EtcdWALHistory ignored nothing is forced.
func (e *Engine) forceEtcdSnapshot(ctx context.Context, r *run) error {
	if !slices.Contains(r.txn.Changed, nodestate.Etcd) || r.txn.Kind == journal.KindRollbackLast {
		return nil
	}
	if _, ok := r.find(journal.PhaseApplying, journal.StepMark, nodestate.Etcd); ok {
		return nil // etcd's own step began
	}
	if rec, ok := r.find(journal.PhaseApplying, journal.StepEtcdSnapshot, nodestate.Etcd); ok && rec.Why == journal.EtcdSnapshotCovered {
		return nil
	}
	if slices.ContainsFunc(r.txn.IgnoredChecks, func(c journal.IgnoredCheck) bool { return c.Check == CheckEtcdWALHistory }) {
		return nil
	}
	forcing, resumed := r.find(journal.PhaseApplying, journal.StepEtcdSnapshot, nodestate.Etcd)
	minor, hazards, err := walHazards(r)
	if err != nil {
		return fmt.Errorf("etcd's WAL before etcd %s: %w", minor, err)
	}
	if len(hazards) == 0 && !resumed {
		return nil
	}
	if len(hazards) > 0 {
		if err := e.restartForSnapshot(ctx, r, snapshotState(r.from), forcing, resumed, minor, hazards); err != nil {
			return err
		}
	}
	if err := e.waitCovered(ctx, r, minor); err != nil {
		return err
	}
	if err := e.append(r, journal.PhaseApplying, journal.Record{Phase: journal.PhaseApplying, Step: journal.StepEtcdSnapshot, Component: nodestate.Etcd, Why: journal.EtcdSnapshotCovered}); err != nil {
		return err
	}
	e.event(r.txn.ID, journal.PhaseApplying, "etcd-snapshot", nodestate.Etcd, "", "a new etcd snapshot covers the WAL tail; etcd "+minor+" replays nothing it refuses")
	e.hit(fault.AfterEtcdSnapshotCovered)
	return nil
}

// restartForSnapshot writes etcd's manifest of st (--snapshot-count=1)
// and waits for kubelet to replace etcd and for it to answer. A resumed
// remediation whose manifest is already on disk only waits for it to
// answer; otherwise it journals a fresh mark first, as a fresh one does.
func (e *Engine) restartForSnapshot(ctx context.Context, r *run, st *nodestate.NodeState, forcing journal.Record, resumed bool, minor string, hazards []etcddata.Hazard) error {
	t0 := time.Now()
	comp := nodestate.Etcd
	t, err := manifest.Target(st, comp)
	if err != nil {
		return err
	}
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		return err
	}
	stamp := forcing.Stamp
	if !resumed {
		stamp = e.store.Stamp()
	}
	want, err := manifest.RenderBytes(st, prof, comp, stamp)
	if err != nil {
		return err
	}
	if resumed {
		if cur, err := e.store.Read(comp); err == nil && bytes.Equal(cur, want) {
			e.event(r.txn.ID, journal.PhaseApplying, "wait-active", comp, describeActive(t), "waiting for etcd with --snapshot-count=1")
			if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
				return e.waitFailed(comp, err)
			}
			e.hit(fault.AfterEtcdSnapshotForcing)
			return nil
		}
	}
	var what []string
	for _, h := range hazards {
		what = append(what, fmt.Sprintf("%d %s (%s)", h.Entries, h.What, h.Issue))
	}
	e.event(r.txn.ID, journal.PhaseApplying, "etcd-snapshot", comp, "", "etcd's WAL holds entries etcd "+minor+" refuses ("+strings.Join(what, "; ")+"): restarting etcd with --snapshot-count=1 to cover them with a snapshot")
	if err := e.gateBefore(ctx, r, journal.PhaseApplying, comp); err != nil {
		return err
	}
	m, err := e.procs.Mark()
	if err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	rec := journal.Record{Phase: journal.PhaseApplying, Step: journal.StepEtcdSnapshot, Component: comp, Why: journal.EtcdSnapshotForcing, ProcMark: &m, Stamp: stamp}
	if err := e.append(r, journal.PhaseApplying, rec); err != nil {
		return err
	}
	if err := e.stopForWrite(ctx, r, journal.PhaseApplying, st, []string{comp}, true); err != nil {
		return err
	}
	if err := e.procs.PastMark(ctx, m); err != nil {
		return fmt.Errorf("%s: %w", comp, err)
	}
	if _, err := e.store.Sweep(); err != nil {
		return err
	}
	if _, err := e.store.Put(comp, want); err != nil {
		return err
	}
	e.event(r.txn.ID, journal.PhaseApplying, "write", comp, "", "wrote etcd manifest with --snapshot-count=1")
	e.event(r.txn.ID, journal.PhaseApplying, "wait-replaced", comp, "kubelet to replace etcd", "waiting for kubelet to replace etcd")
	if err := e.procs.WaitReplaced(ctx, t, m, e.dl.Replace); err != nil {
		return e.waitFailed(comp, err)
	}
	e.event(r.txn.ID, journal.PhaseApplying, "wait-active", comp, describeActive(t), "waiting for etcd with --snapshot-count=1")
	if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
		return e.waitFailed(comp, err)
	}
	r.steps = append(r.steps, StepTime{Component: comp + " (snapshot)", Phase: string(journal.PhaseApplying), Elapsed: time.Since(t0)})
	e.hit(fault.AfterEtcdSnapshotForcing)
	return nil
}

// waitCovered re-scans etcd's WAL until no entry the new minor refuses is
// left after its newest snapshot, or Deadlines.EtcdSnapshot passes.
func (e *Engine) waitCovered(ctx context.Context, r *run, minor string) error {
	ctx, cancel := context.WithTimeout(ctx, e.dl.EtcdSnapshot)
	defer cancel()
	tick := time.NewTicker(etcdSnapshotPoll)
	defer tick.Stop()
	e.event(r.txn.ID, journal.PhaseApplying, "wait-snapshot", nodestate.Etcd, "a new etcd snapshot to cover the WAL tail", "waiting for etcd to take a snapshot that covers its WAL tail")
	for {
		_, hazards, err := walHazards(r)
		if err == nil && len(hazards) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			why := "entries it refuses are still after the newest snapshot"
			if err != nil {
				why = err.Error()
			}
			return fmt.Errorf("etcd with --snapshot-count=1 took no snapshot covering its WAL tail within %s (%s): etcd %s would refuse to start on it", e.dl.EtcdSnapshot, why, minor)
		case <-tick.C:
		}
	}
}

// EtcdSnapshotForced says why an upgrade of p would force an etcd
// snapshot before etcd's own step (etcd's WAL holds entries the new minor
// refuses at start), "" when it would not. It reads the WAL read-only, as
// the transaction's first step will; a WAL that cannot be read is the
// EtcdWALHistory check's to report, and is "" here.
func (p *Plan) EtcdSnapshotForced() string {
	if !slices.ContainsFunc(p.Changes, func(c Change) bool { return c.Component == nodestate.Etcd }) {
		return ""
	}
	minor, hazards, err := walHazards(&run{from: p.From, to: p.To})
	if err != nil || len(hazards) == 0 {
		return ""
	}
	var what []string
	for _, h := range hazards {
		what = append(what, fmt.Sprintf("%d entries: %s (%s)", h.Entries, h.What, h.Issue))
	}
	return fmt.Sprintf("etcd's WAL holds entries etcd %s refuses at start (%s): the transaction's first step restarts etcd with --snapshot-count=1 until a new snapshot covers them (journaled etcd-snapshot, docs/versions.md), then etcd's own step", minor, strings.Join(what, "; "))
}
