package engine

// planned -> snapshotted: the manifest set, and etcd's data when etcd
// changes.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// snapshotDir is where transaction id's manifest snapshot lives.
func (e *Engine) snapshotDir(id string) string { return e.snaps.Path(id) }

// takeSnapshot: planned -> snapshotted. The manifest set, and etcd's data
// when the upgrade changes etcd.
func (e *Engine) takeSnapshot(ctx context.Context, r *run) error {
	// Always the derived path: a journaled SnapshotDir is this or empty
	// (trustTxn).
	dir := e.snapshotDir(r.txn.ID)
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
	e.hit(fault.AfterSnapshot)
	var backup []byte
	if r.txn.Kind == journal.KindUpgrade && slices.Contains(r.txn.Changed, nodestate.Etcd) {
		path := e.snaps.EtcdPath(r.txn.ID)
		e.event(r.txn.ID, r.txn.Phase, "etcd-backup", nodestate.Etcd, "etcd snapshot", "snapshot of etcd's data to "+path)
		bctx, cancel := context.WithTimeout(ctx, e.dl.EtcdBackup)
		b, err := e.etcd.Backup(bctx, r.from, path)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%w: the etcd backup before changing etcd's image did not finish within %s: %w", ErrEtcdBackupTimeout, e.dl.EtcdBackup, err)
			}
			return fmt.Errorf("etcd backup before changing etcd's image: %w", err)
		}
		if backup, err = json.Marshal(b); err != nil {
			return err
		}
		e.hit(fault.AfterEtcdBackup)
	}
	if err := move(r.txn.Phase, journal.PhaseSnapshotted); err != nil {
		return err
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
