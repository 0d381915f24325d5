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

// restoreEtcd puts etcd's data back when the upgrade had rewritten etcd's
// manifest, for a single-member cluster: stop etcd, restore the backup into
// its data dir (the data it wrote is moved aside, not deleted). In a
// multi-member cluster the other members hold the data; only the manifest
// is rolled back. Everything that can be checked is checked before etcd is
// stopped; a restore that fails after the stop leaves the transaction open
// (errResumable) for resume to finish.
func (e *Engine) restoreEtcd(ctx context.Context, r *run, written []string, snap *snapshot.Loaded) error {
	if !slices.Contains(written, nodestate.Etcd) || len(r.txn.EtcdBackup) == 0 {
		return nil
	}
	if _, done := r.find(journal.PhaseRollingBack, journal.StepEtcdRestored, nodestate.Etcd); done {
		return nil
	}
	if !e.top.single() {
		e.log.Warn("etcd is a multi-member cluster: its data is not restored, only its manifest; the other members hold the data")
		return nil
	}
	// A mark is journaled before the write: if the manifest on disk is
	// still the snapshot's, the new etcd never ran and its data is the
	// backup's plus what the old etcd wrote since. Keep it. The same when
	// the manifest was rewritten but kubelet never started a newer etcd on
	// it: the old one served every write since the backup.
	if b, err := e.store.Read(nodestate.Etcd); err == nil && sameModuloStamp(snap, nodestate.Etcd, b) {
		e.log.Info("etcd's manifest was never rewritten: its data is not restored")
		return nil
	}
	if ran, why := e.newerEtcdRan(r); !ran {
		e.log.Info("no newer etcd ran on etcd's data: it is not restored", "why", why)
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

// newerEtcdRan reports whether an etcd started from the upgrade's manifest
// may have run on etcd's data, and why: its replacement was journaled (the
// upgrade saw it), or a process of etcd runs that started after its mark,
// or none runs (unknown: a newer etcd may have run and exited). Only when
// every running etcd process started before the mark, in this boot, did
// the old etcd serve the data all along.
func (e *Engine) newerEtcdRan(r *run) (bool, string) {
	if _, ok := r.findIn(journal.StepReplaced, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying); ok {
		return true, "the upgrade saw kubelet replace etcd"
	}
	mark, ok := r.findIn(journal.StepMark, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying)
	if !ok || mark.ProcMark == nil {
		return true, "no mark of etcd's step is journaled"
	}
	t, err := manifest.Target(r.to, nodestate.Etcd)
	if err != nil {
		return true, err.Error()
	}
	done, stale, err := e.procs.Replaced(t, *mark.ProcMark)
	switch {
	case err != nil:
		return true, fmt.Sprintf("etcd's processes cannot be read (%v)", err)
	case done:
		return true, "an etcd started after its manifest was rewritten runs"
	case len(stale) == 0:
		return true, "no etcd process runs"
	}
	ps, err := e.procs.PIDs(t.Binary)
	if err != nil || len(ps) != len(stale) {
		return true, "an etcd started after its manifest was rewritten runs beside the old one"
	}
	return false, fmt.Sprintf("etcd runs as %s, started before its manifest was rewritten", pids(stale))
}
