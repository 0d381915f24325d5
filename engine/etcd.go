package engine

// etcd's data in a rollback: stop, restore, keep the replaced data aside.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// decideEtcd decides what becomes of etcd's data when the transaction
// wrote etcd's manifest ("" when it did not), and journals it
// (StepEtcdData) before the rollback stops etcd: a resume follows the last
// journaled decision, whatever runs by then. A single member's data is
// decided by singleMemberData; a member of several keeps its data (the
// others hold it) or downgrades with the cluster, by memberEtcdDecision.
func (e *Engine) decideEtcd(ctx context.Context, r *run, written []string, snap *snapshot.Loaded) (string, error) {
	if !slices.Contains(written, nodestate.Etcd) {
		return "", nil
	}
	if _, done := r.find(journal.PhaseRollingBack, journal.StepEtcdRestored, nodestate.Etcd); done {
		return journal.EtcdRestore, nil // restored by a binary that journaled no decision
	}
	if d, ok := r.find(journal.PhaseRollingBack, journal.StepEtcdData, nodestate.Etcd); ok {
		return d.EtcdData, nil
	}
	data, why := journal.EtcdKeep, ""
	if !e.top.single() {
		var err error
		if data, why, err = e.memberEtcdDecision(ctx, r); err != nil {
			return "", err
		}
	} else {
		var err error
		if data, why, err = e.singleMemberData(ctx, r, snap); err != nil {
			return "", err
		}
	}
	return data, e.journalEtcdData(r, data, why)
}

// journalEtcdData journals the decision data about etcd's data, and tells.
func (e *Engine) journalEtcdData(r *run, data, why string) error {
	msg := "etcd's data is kept: " + why
	switch data {
	case journal.EtcdRestore:
		msg = "etcd's data is restored from its backup: " + why
	case journal.EtcdDowngrade:
		msg = "etcd's data is downgraded: " + why
	}
	e.event(r.txn.ID, r.txn.Phase, "etcd-data", nodestate.Etcd, "", msg)
	rec := journal.Record{Phase: journal.PhaseRollingBack, Step: journal.StepEtcdData, Component: nodestate.Etcd, EtcdData: data, Why: why}
	return e.append(r, journal.PhaseRollingBack, rec)
}

// singleMemberData decides a single member's data, and says why:
//
//	manifest still the snapshot's         keep: the new etcd never ran
//	etcd kept within its minor, or down   keep: the format did not change
//	no newer etcd wrote (stale, silent)   keep: the old one served it all
//	else                                  downgradeOrRestore
//
// A backup decides nothing but whether restore is a way back.
func (e *Engine) singleMemberData(ctx context.Context, r *run, snap *snapshot.Loaded) (string, string, error) {
	if b, err := e.store.Read(nodestate.Etcd); err == nil && sameModuloStamp(snap, nodestate.Etcd, b) {
		return journal.EtcdKeep, "etcd's manifest was never rewritten", nil
	}
	if from, to, moves := etcdMinors(r); !moves {
		// Only a newer minor writes a format the old etcd may not read.
		return journal.EtcdKeep, fmt.Sprintf("the transaction keeps etcd within minor %s, whose data format does not change", orMinor(from, r)), nil
	} else if cluster.MinorAtLeast(from+".0", to) {
		return journal.EtcdKeep, fmt.Sprintf("the transaction moved etcd down from %s to %s, whose data etcd %s reads", from, to, from), nil
	}
	ran, why := e.newerEtcdRan(ctx, r)
	switch ran {
	case etcdRanStale, etcdRanSilent:
		return journal.EtcdKeep, "no newer etcd wrote to it: " + why, nil
	}
	return e.downgradeOrRestore(ctx, r, why)
}

// orMinor is from, or when the versions of etcd cannot be read the image
// etcd runs from.
func orMinor(from string, r *run) string {
	if from != "" {
		return from
	}
	return r.from.Images[nodestate.Etcd]
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
	// etcdRanSilent: the run that wrote etcd's manifest watched the new
	// etcd from the old one's stop to the end of its wait, and it never
	// answered (journaled), nor does one answer now: it wrote nothing.
	etcdRanSilent
)

// newerEtcdRan reports whether an etcd started from the upgrade's manifest
// may have written to etcd's data, and why. The journal decides when it
// can (answered: yes; watched silent to the end of its wait and silent
// now: no); else the processes do. etcdRanNoneRuns counts as yes for a
// single member's restore, and as no for a member of several only when
// etcd reports the cluster version did not move (memberEtcdDecision).
func (e *Engine) newerEtcdRan(ctx context.Context, r *run) (etcdRan, string) {
	to := r.to.Images[nodestate.Etcd]
	if _, ok := r.findIn(journal.StepEtcdAnswered, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying); ok {
		return etcdRanMaybe, "etcd " + to + " answered on it"
	}
	mark, ok := r.findIn(journal.StepMark, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying)
	if _, forced := r.find(journal.PhaseApplying, journal.StepEtcdSnapshot, nodestate.Etcd); forced && !ok {
		// Only the forced snapshot's restart wrote etcd's manifest: the
		// same etcd, with --snapshot-count=1, ran on the data.
		return etcdRanStale, "only etcd " + r.from.Images[nodestate.Etcd] + " ran on it (restarted with --snapshot-count=1; the upgrade's etcd step never began)"
	}
	t, err := manifest.Target(r.to, nodestate.Etcd)
	if err != nil {
		return etcdRanMaybe, err.Error()
	}
	if _, silent := r.findIn(journal.StepEtcdSilent, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying); silent && ok && mark.ProcMark != nil {
		// Watched until the wait ended; since then kubelet may have
		// started it again (a crash loop's next try), and one that
		// answers now may have written.
		if done, _, err := e.procs.Replaced(t, *mark.ProcMark); err != nil {
			return etcdRanMaybe, fmt.Sprintf("etcd's processes cannot be read (%v)", err)
		} else if done && e.procs.Active(ctx, t) {
			return etcdRanMaybe, "etcd " + to + " never answered during the upgrade's wait but answers now"
		}
		if _, seen := r.findIn(journal.StepReplaced, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying); !seen {
			return etcdRanSilent, "etcd " + to + " never ran (kubelet never started it: its wait ended, journaled) and never answered"
		}
		return etcdRanSilent, "etcd " + to + " never answered (it started, but its wait ended without an answer, journaled) and does not answer now"
	}
	if _, ok := r.findIn(journal.StepReplaced, nodestate.Etcd, journal.PhaseApplying, journal.PhaseVerifying); ok {
		return etcdRanMaybe, "the upgrade saw kubelet replace etcd, and whether it answered is not journaled"
	}
	if !ok || mark.ProcMark == nil {
		return etcdRanMaybe, "no mark of etcd's step is journaled"
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
