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
	if err := e.etcd.CheckRestore(r.from, &b, aside); err != nil {
		return fmt.Errorf("etcd's data cannot be restored, so etcd was left running: %w", err)
	}
	e.event(r.txn.ID, r.txn.Phase, "etcd-stop", nodestate.Etcd, "etcd to exit", "stopping etcd to restore its data")
	if err := e.store.Stop(ctx, r.from, nodestate.Etcd, e.dl.Stop); err != nil {
		return err
	}
	e.hit(fault.AfterEtcdStop)
	e.event(r.txn.ID, r.txn.Phase, "etcd-restore", nodestate.Etcd, "", fmt.Sprintf("restoring etcd data from %s (revision %d); the data it replaces is kept at %s", b.Path, b.Revision, aside))
	if err := e.etcd.Restore(ctx, r.from, &b, aside); err != nil {
		return fmt.Errorf("%w: etcd is stopped and its data restore failed: %v", errResumable, err)
	}
	e.hit(fault.AfterEtcdRestore)
	return e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepEtcdRestored, Component: nodestate.Etcd, AsideDir: aside})
}
