package engine

// Data that a newer etcd minor wrote to goes back with etcd's own
// downgrade protocol, losing no write: a single member's, where the backup
// is the last resort when etcd cannot or will not downgrade; and a member
// of several whose cluster version moved, where there is no backup to
// restore and the other members go back in their own transactions.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// downgradeOrRestore decides for a single member's data that a newer etcd
// minor wrote to (or may have): downgrade when the new etcd answers (the
// protocol runs through it), else restore the backup, else (no backup: a
// rollback --last takes none) pause. etcdutl's offline migrate is no way
// back: once the cluster version moved, the old etcd refuses the data.
func (e *Engine) downgradeOrRestore(ctx context.Context, r *run, wrote string) (string, string, error) {
	from, to, _ := etcdMinors(r)
	t, err := manifest.Target(r.to, nodestate.Etcd)
	if err == nil && e.procs.Active(ctx, t) {
		return journal.EtcdDowngrade, fmt.Sprintf("etcd %s wrote to it (%s) and answers: etcd's downgrade protocol moves it back to %s, every write kept", to, wrote, from), nil
	}
	why := fmt.Sprintf("etcd %s wrote to it, or may have (%s), and does not answer, so etcd's downgrade protocol cannot move it back to %s", to, wrote, from)
	if err != nil {
		why = fmt.Sprintf("a newer etcd wrote to it, or may have: %s; %v", wrote, err)
	}
	if len(r.txn.EtcdBackup) == 0 {
		return "", "", noBackupPause(why, to)
	}
	return journal.EtcdRestore, why + ": " + e.backupLoses(ctx, r), nil
}

// noBackupPause is the pause of a rollback whose etcd data only etcd's
// downgrade protocol can move back (there is no backup), when it cannot
// run now: etcd is left as it is, nothing is restored.
func noBackupPause(why, to string) error {
	return fmt.Errorf("%w: %s; with no backup to restore, etcd %s is left as it is: run `stratum-upgrade resume` once it answers", errResumable, why, to)
}

// downgradeEtcd runs etcd's downgrade protocol through the running new
// etcd (validate, enable, wait for the old storage version) and journals
// it (StepEtcdDowngraded) before the rollback stops etcd. No answer is
// never a refusal: it pauses (errResumable). On a refusal:
//
//	single member with a backup   restore (journaled, with what it loses)
//	single member, no backup      pause
//	member of several             rollback-failed (ErrEtcdPointOfNoReturn)
//
// A downgrade already enabled (an earlier run, another node) is waited for.
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
		if ctx.Err() != nil || !e.top.single() {
			// A member of several has no backup to fall back on; its
			// etcd may wait for the others (a whole cluster rebooting):
			// the rollback pauses, the new etcd left as it is.
			return "", fmt.Errorf("%w: etcd %s does not answer, so its downgrade cannot run yet: %v; run `stratum-upgrade resume` once it answers", errResumable, to, err)
		}
		why := fmt.Sprintf("etcd %s no longer answers (%v), so etcd's downgrade protocol cannot run", to, err)
		if len(r.txn.EtcdBackup) == 0 {
			return "", noBackupPause(why, to)
		}
		why += ": " + e.backupLoses(ctx, r)
		return journal.EtcdRestore, e.journalEtcdData(r, journal.EtcdRestore, why)
	}
	if !e.top.single() {
		if err := e.waitClusterVersion(ctx, r, to); err != nil {
			return "", err
		}
	}
	e.event(r.txn.ID, r.txn.Phase, "etcd-downgrade", nodestate.Etcd, "etcd's storage version to be "+from, "downgrading etcd's data to "+from+" with etcd's downgrade protocol")
	got, err := e.etcd.Downgrade(ctx, r.to, from, e.dl.EtcdBackup, e.enablingHook(ctx, r, journal.PhaseRollingBack, from))
	if err != nil && downgradeRefused(err) && !got.Enabled {
		if jerr := e.closeRefusedEnable(r, journal.PhaseRollingBack, from); jerr != nil {
			return "", jerr
		}
	}
	switch {
	case err == nil:
	case ctx.Err() != nil || !downgradeRefused(err):
		// No answer (a timeout, an election) is never a refusal: the
		// rollback pauses and resume asks again; nothing is restored.
		return "", fmt.Errorf("%w: %v; etcd %s left running, nothing restored: run `stratum-upgrade resume` to ask etcd again", errResumable, err, to)
	case !e.top.single():
		// The other members hold the data: there is no backup to
		// restore, and etcd will not move it back.
		return "", fmt.Errorf("%w: %v; etcd %s left running, nothing restored (see %s)", ErrEtcdPointOfNoReturn, err, to, docGoingBack)
	case len(r.txn.EtcdBackup) == 0:
		return "", noBackupPause(fmt.Sprintf("etcd refused its downgrade (%v)", err), to)
	default:
		why := fmt.Sprintf("etcd's downgrade protocol failed (%v): %s", err, loses(r, got.Revision))
		return journal.EtcdRestore, e.journalEtcdData(r, journal.EtcdRestore, why)
	}
	e.hit(fault.AfterEtcdDowngrade)
	why := fmt.Sprintf("storage version %s at revision %d", got.StorageVersion, got.Revision)
	e.event(r.txn.ID, r.txn.Phase, "etcd-downgraded", nodestate.Etcd, "", "etcd's data downgraded: "+why)
	if !e.top.single() {
		e.event(r.txn.ID, r.txn.Phase, "etcd-downgrade-members", nodestate.Etcd, "", fmt.Sprintf(
			"etcd downgrades to %s: each other member on %s then needs `stratum-upgrade rollback --last` (see %s)", from, to, docGoingBack))
	}
	return journal.EtcdDowngrade, e.append(r, journal.PhaseRollingBack, journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepEtcdDowngraded, Component: nodestate.Etcd, Why: why})
}

// waitClusterVersion waits (Deadlines.Active at most) until etcd reports
// the cluster version at minor to, or a downgrade enabled: etcd validates
// a downgrade only one minor below the cluster version. Giving up pauses
// the rollback (errResumable), the new etcd left running.
func (e *Engine) waitClusterVersion(ctx context.Context, r *run, to string) error {
	deadline := time.Now().Add(e.dl.Active)
	last := "unread"
	for {
		v, err := e.readVersions(ctx, r.from)
		if err == nil {
			if v.Health != nil && v.Health.EtcdDowngrade() != nil {
				// Enabled already (by a run that crashed since, or by an
				// operator): the cluster version was set back, and
				// Downgrade waits for it.
				return nil
			}
			if cv := v.Cluster(); cv != "" && cluster.MinorAtLeast(cv, to) {
				return nil
			} else if cv != "" {
				last = cv
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: etcd's cluster version did not reach %s within %s (it is %s): run `stratum-upgrade resume` once every member answers (see %s)", errResumable, to, e.dl.Active, last, docGoingBack)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for etcd's cluster version to be %s: %v", errResumable, to, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
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

// downgradeBeforeStep runs etcd's downgrade protocol before a forwards
// etcd step that moves etcd down a minor (rollback --last) stops the
// member: an older etcd starts only on data of its own storage version.
// It is journaled (StepEtcdDowngraded) before the step's mark, so a resumed
// step does not ask a stopped etcd again. A failure fails the step with
// etcd's manifest unwritten; a downgrade this step enabled is cancelled,
// one enabled before is left as it was.
func (e *Engine) downgradeBeforeStep(ctx context.Context, r *run, p journal.Phase, comp string) error {
	to := etcdDownTo(r.from, r.to)
	if comp != nodestate.Etcd || p == journal.PhaseRollingBack || to == "" {
		return nil
	}
	from, _, _ := etcdMinors(r)
	if r.downgradedBeforeStep(p) {
		return nil
	}
	e.event(r.txn.ID, p, "etcd-downgrade", comp, "etcd's storage version to be "+to, "downgrading etcd's data from "+from+" to "+to+" before the step puts etcd "+to+" back")
	got, err := e.etcd.Downgrade(ctx, r.from, to, e.dl.EtcdBackup, e.enablingHook(ctx, r, p, to))
	if err != nil {
		if downgradeRefused(err) && !got.Enabled {
			if jerr := e.closeRefusedEnable(r, p, to); jerr != nil {
				return jerr
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %v", errResumable, err)
		}
		left := fmt.Sprintf("etcd %s still runs here, its manifest not rewritten", from)
		if r.enabledDowngrade() == "" {
			left += "; a downgrade enabled before this step stays as it was (etcdctl downgrade cancel ends it)"
		} else {
			msg, _ := e.cancelEnabledDowngrade(ctx, r, p, r.from)
			left += "; " + msg
		}
		return fmt.Errorf("%s: %w; %s", comp, err, left)
	}
	e.hit(fault.AfterEtcdDowngrade)
	why := fmt.Sprintf("storage version %s at revision %d", got.StorageVersion, got.Revision)
	e.event(r.txn.ID, p, "etcd-downgraded", comp, "", "etcd's data downgraded: "+why)
	return e.append(r, p, journal.Record{Phase: p, Step: journal.StepEtcdDowngraded, Component: comp, Why: why})
}

// downgradedBeforeStep reports whether etcd's data was downgraded before
// etcd's step of phase p (StepEtcdDowngraded) and no cancel of the
// downgrade came after it: a cancel sets the storage version back up, so
// the step downgrades again.
func (r *run) downgradedBeforeStep(p journal.Phase) bool {
	done := false
	for _, rec := range r.recs {
		switch {
		case rec.Phase == p && rec.Step == journal.StepEtcdDowngraded && rec.Component == nodestate.Etcd:
			done = true
		case rec.Step == journal.StepEtcdDowngradeEnable && rec.Why == journal.EtcdDowngradeCancelled:
			done = false
		}
	}
	return done
}
