package engine

// A single member's data that a newer etcd minor wrote to goes back with
// etcd's own downgrade protocol, losing no write; the backup is the last
// resort, when etcd cannot or will not downgrade.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// downgradeOrRestore is the decision for a single member's data that a
// newer etcd minor wrote to (or may have), given why it did: downgrade
// when the new etcd answers now (the protocol runs through it), restore
// when it does not. etcd's offline schema migration (etcdutl migrate) is
// no way back here: once the cluster version moved, which a single member
// does within seconds, the WAL replays it and the old etcd refuses to
// start ("invalid downgrade; server version is lower than determined
// cluster version"); only the online protocol sets it back.
func (e *Engine) downgradeOrRestore(ctx context.Context, r *run, wrote string) (string, string) {
	from, to, _ := etcdMinors(r)
	t, err := manifest.Target(r.to, nodestate.Etcd)
	if err != nil {
		return journal.EtcdRestore, fmt.Sprintf("a newer etcd wrote to it, or may have: %s; %v", wrote, err)
	}
	if !e.procs.Active(ctx, t) {
		return journal.EtcdRestore, fmt.Sprintf("etcd %s wrote to it, or may have (%s), and does not answer, so etcd's downgrade protocol cannot move it back to %s: %s", to, wrote, from, e.backupLoses(ctx, r))
	}
	return journal.EtcdDowngrade, fmt.Sprintf("etcd %s wrote to it (%s) and answers: etcd's downgrade protocol moves it back to %s, every write kept", to, wrote, from)
}

// downgradeEtcd runs etcd's downgrade protocol on the running new etcd
// (validate, enable, wait until its storage version is the old minor), and
// journals that it did (StepEtcdDowngraded), before the rollback stops
// etcd. It returns the decision the rollback goes on with: downgrade, or,
// when etcd refused or the wait ended first, restore (journaled as a new
// etcd-data record, with how many revisions the backup loses). It is
// resumable: a downgrade enabled by an earlier run is waited for.
func (e *Engine) downgradeEtcd(ctx context.Context, r *run) (string, error) {
	if _, done := r.find(journal.PhaseRollingBack, journal.StepEtcdDowngraded, nodestate.Etcd); done {
		return journal.EtcdDowngrade, nil
	}
	from, to, _ := etcdMinors(r)
	t, err := manifest.Target(r.to, nodestate.Etcd)
	if err != nil {
		return "", err
	}
	// A resume after a reboot finds kubelet starting the new etcd again:
	// it is waited for, not taken for one that cannot downgrade.
	if err := e.procs.WaitActive(ctx, t, e.dl.Active); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("%w: %v", errResumable, err)
		}
		why := fmt.Sprintf("etcd %s no longer answers (%v), so etcd's downgrade protocol cannot run: %s", to, err, e.backupLoses(ctx, r))
		return journal.EtcdRestore, e.journalEtcdData(r, journal.EtcdRestore, why)
	}
	e.event(r.txn.ID, r.txn.Phase, "etcd-downgrade", nodestate.Etcd, "etcd's storage version to be "+from, "downgrading etcd's data to "+from+" with etcd's downgrade protocol")
	got, err := e.etcd.Downgrade(ctx, r.to, from, e.dl.EtcdBackup)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("%w: %v", errResumable, err)
		}
		why := fmt.Sprintf("etcd's downgrade protocol failed (%v): %s", err, loses(r, got.Revision))
		return journal.EtcdRestore, e.journalEtcdData(r, journal.EtcdRestore, why)
	}
	e.hit(fault.AfterEtcdDowngrade)
	why := fmt.Sprintf("storage version %s at revision %d", got.StorageVersion, got.Revision)
	e.event(r.txn.ID, r.txn.Phase, "etcd-downgraded", nodestate.Etcd, "", "etcd's data downgraded: "+why)
	return journal.EtcdDowngrade, e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepEtcdDowngraded, Component: nodestate.Etcd, Why: why})
}

// backupLoses reads etcd's revision (when some etcd answers) and says how
// many revisions a restore of the backup loses.
func (e *Engine) backupLoses(ctx context.Context, r *run) string {
	rev, err := e.etcd.Revision(ctx, r.to)
	if err != nil {
		rev = 0
	}
	return loses(r, rev)
}

// loses says how many revisions the backup lacks of etcd's revision rev (0:
// unknown).
func loses(r *run, rev int64) string {
	var b etcddata.Backup
	if err := json.Unmarshal(r.txn.EtcdBackup, &b); err != nil || b.Revision == 0 {
		return "the backup is restored; how many revisions it loses is unknown"
	}
	if rev == 0 {
		return fmt.Sprintf("the backup (revision %d) is restored; etcd's revision is unknown, so how many revisions it loses is too", b.Revision)
	}
	return fmt.Sprintf("the backup (revision %d) is restored, losing %d revisions (etcd was at %d)", b.Revision, max(rev-b.Revision, 0), rev)
}
