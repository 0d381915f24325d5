package engine

// etcd's data in a rollback: stop, restore, keep the replaced data aside.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// decideEtcd decides, when the transaction wrote etcd's manifest, what
// becomes of etcd's data, and journals it (StepEtcdData) before the
// rollback stops etcd: a resume follows the journaled decision whatever
// runs by then (kubelet may have stopped the old etcd since, or the
// rollback's own stop). It reports whether the data is restored. For a
// single member: restored when a newer etcd ran on it (or may have), kept
// when the old etcd served it all along. In a multi-member cluster the
// other members hold the data: it is kept, and whether the old etcd may
// go back at all is decided by memberEtcdDecision, which pauses or
// refuses the rollback rather than guess.
func (e *Engine) decideEtcd(ctx context.Context, r *run, written []string, snap *snapshot.Loaded) (bool, error) {
	if !slices.Contains(written, nodestate.Etcd) {
		return false, nil
	}
	if _, done := r.find(journal.PhaseRollingBack, journal.StepEtcdRestored, nodestate.Etcd); done {
		return true, nil // restored by a binary that journaled no decision
	}
	if d, ok := r.find(journal.PhaseRollingBack, journal.StepEtcdData, nodestate.Etcd); ok {
		return d.EtcdData == journal.EtcdRestore, nil
	}
	data, why := journal.EtcdKeep, ""
	if !e.top.single() {
		var err error
		if why, err = e.memberEtcdDecision(ctx, r); err != nil {
			return false, err
		}
	} else {
		data, why = e.singleMemberData(r, snap)
	}
	msg := "etcd's data is kept: " + why
	if data == journal.EtcdRestore {
		msg = "etcd's data is restored from its backup: " + why
	}
	e.event(r.txn.ID, r.txn.Phase, "etcd-data", nodestate.Etcd, "", msg)
	rec := journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepEtcdData, Component: nodestate.Etcd, EtcdData: data, Why: why}
	if err := e.append(r, journal.PhaseRollingBack, rec); err != nil {
		return false, err
	}
	return data == journal.EtcdRestore, nil
}

// singleMemberData is whether a single member's data is restored, and why.
// If the manifest on disk is still the snapshot's, the new etcd never ran
// (a mark is journaled before the write) and its data is the backup's plus
// what the old etcd wrote since: keep it. The same when the manifest was
// rewritten but kubelet never started a newer etcd on it: the old one
// served every write since the backup.
func (e *Engine) singleMemberData(r *run, snap *snapshot.Loaded) (string, string) {
	if len(r.txn.EtcdBackup) == 0 {
		return journal.EtcdKeep, "no backup of etcd's data was taken"
	}
	if b, err := e.store.Read(nodestate.Etcd); err == nil && sameModuloStamp(snap, nodestate.Etcd, b) {
		return journal.EtcdKeep, "etcd's manifest was never rewritten"
	}
	ran, why := e.newerEtcdRan(r)
	if ran != etcdRanStale {
		return journal.EtcdRestore, "a newer etcd ran on it, or may have: " + why
	}
	return journal.EtcdKeep, "no newer etcd ran on it: " + why
}

// restoreEtcd puts a single member's data back when decideEtcd decided
// so: stop etcd, restore the backup into its data dir (the data it wrote
// is moved aside, not deleted). Everything that can be checked is checked
// before etcd is stopped; a restore that fails after the stop leaves the
// transaction open (errResumable) for resume to finish.
func (e *Engine) restoreEtcd(ctx context.Context, r *run, restore bool) error {
	if !restore {
		return nil
	}
	if _, done := r.find(journal.PhaseRollingBack, journal.StepEtcdRestored, nodestate.Etcd); done {
		return nil
	}
	var b etcddata.Backup
	if err := json.Unmarshal(r.txn.EtcdBackup, &b); err != nil {
		return fmt.Errorf("journaled etcd backup: %w", err)
	}
	aside := r.from.Etcd.DataDir + ".stratum-pre-rollback-" + r.txn.ID
	if err := e.etcd.CheckRestore(r.from, &b, aside, e.top.members); err != nil {
		return fmt.Errorf("etcd's data cannot be restored, so etcd was left running: %w", err)
	}
	e.event(r.txn.ID, r.txn.Phase, "etcd-stop", nodestate.Etcd, "etcd to exit", "stopping etcd to restore its data")
	if err := e.store.Stop(ctx, r.from, nodestate.Etcd, e.dl.Stop); err != nil {
		// The manifest may be gone already: the transaction must stay
		// open, and resume stops etcd again before it restores.
		return fmt.Errorf("%w: stopping etcd to restore its data: %v", errResumable, err)
	}
	e.hit(fault.AfterEtcdStop)
	e.event(r.txn.ID, r.txn.Phase, "etcd-restore", nodestate.Etcd, "", fmt.Sprintf("restoring etcd data from %s (revision %d); the data it replaces is kept at %s", b.Path, b.Revision, aside))
	if err := e.etcd.Restore(ctx, r.from, &b, aside, e.top.members); err != nil {
		return fmt.Errorf("%w: etcd is stopped and its data restore failed: %v", errResumable, err)
	}
	e.hit(fault.AfterEtcdRestore)
	return e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepEtcdRestored, Component: nodestate.Etcd, AsideDir: aside})
}

// etcdRan is newerEtcdRan's answer: whether an etcd started from the
// upgrade's manifest may have run on etcd's data, and what a "no" rests on.
type etcdRan int

const (
	// etcdRanMaybe: it ran or may have (its replacement was journaled, a
	// process started after its mark runs, or /proc cannot be read).
	etcdRanMaybe etcdRan = iota
	// etcdRanStale: every running etcd process started before the mark,
	// in this boot: the old etcd served the data all along.
	etcdRanStale
	// etcdRanNoneRuns: no etcd process runs and the upgrade never saw one
	// start. A newer etcd may have run and exited unseen (a crash after
	// the write, then a reboot before kubelet started etcd again).
	etcdRanNoneRuns
)

// newerEtcdRan reports whether an etcd started from the upgrade's manifest
// may have run on etcd's data, and why. A single member's data restore
// takes etcdRanNoneRuns as yes; a member of several takes it as no only
// when etcd reports the cluster version (memberEtcdDecision), since the
// cluster version would show such a run.
func (e *Engine) newerEtcdRan(r *run) (etcdRan, string) {
	if _, ok := r.findIn(journal.StepReplaced, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying); ok {
		return etcdRanMaybe, "the upgrade saw kubelet replace etcd"
	}
	mark, ok := r.findIn(journal.StepMark, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying)
	if !ok || mark.ProcMark == nil {
		return etcdRanMaybe, "no mark of etcd's step is journaled"
	}
	t, err := manifest.Target(r.to, nodestate.Etcd)
	if err != nil {
		return etcdRanMaybe, err.Error()
	}
	done, stale, err := e.procs.Replaced(t, *mark.ProcMark)
	switch {
	case err != nil:
		return etcdRanMaybe, fmt.Sprintf("etcd's processes cannot be read (%v)", err)
	case done:
		return etcdRanMaybe, "an etcd started after its manifest was rewritten runs"
	case len(stale) == 0:
		return etcdRanNoneRuns, "no etcd process runs and the upgrade never saw one start"
	}
	ps, err := e.procs.Of(t)
	if err != nil || len(ps) != len(stale) {
		return etcdRanMaybe, "an etcd started after its manifest was rewritten runs beside the old one"
	}
	return etcdRanStale, fmt.Sprintf("etcd runs as %s, started before its manifest was rewritten", pids(stale))
}
