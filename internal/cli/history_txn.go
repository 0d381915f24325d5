package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
)

// txnDetail is history TXN's output (docs/schemas/history-txn.json): the
// transaction as history lists it, its etcd backup, the report of a failed
// rollback, and its records.
type txnDetail struct {
	txnInfo
	// EtcdBackupFile is the etcd data snapshot taken before etcd's image
	// changed; null when none was taken.
	EtcdBackupFile *etcdBackupJSON `json:"etcdBackupFile"`
	// RollbackReport is each component's state when the rollback failed;
	// null unless it did.
	RollbackReport []componentReportJSON `json:"rollbackReport"`
	// EtcdPath is how the rollback took etcd's data; null when it decided
	// nothing about it (no rollback, or etcd not written).
	EtcdPath *etcdPathJSON `json:"etcdPath"`
	Records  []recordJSON  `json:"records"`
}

// etcdPathJSON is a rollback's way with etcd's data, or a step's that
// moved etcd down a minor: kept, downgraded (by etcd's downgrade protocol)
// or restored (from the backup: why says how many revisions it lost), and
// why.
type etcdPathJSON struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// etcdPathOf is the last etcd-data decision of recs, or else the
// downgrade a step down a minor made, if any.
func etcdPathOf(recs []journal.Record) *etcdPathJSON {
	var out *etcdPathJSON
	for _, r := range recs {
		if r.Step == journal.StepEtcdDowngraded && r.Phase != journal.PhaseRollingBack && out == nil {
			// A step that moved etcd down a minor (rollback --last)
			// downgraded its data first; a rollback's decision after it
			// is what the data ended as.
			out = &etcdPathJSON{Path: "downgraded", Why: "etcd's step moved etcd down a minor, with etcd's downgrade protocol first: " + r.Why}
			continue
		}
		if r.Step != journal.StepEtcdData {
			continue
		}
		path := map[string]string{journal.EtcdKeep: "kept", journal.EtcdDowngrade: "downgraded", journal.EtcdRestore: "restored"}[r.EtcdData]
		if path == "" {
			path = r.EtcdData
		}
		out = &etcdPathJSON{Path: path, Why: r.Why}
	}
	return out
}

func (g *globals) showTxn(id string) error {
	if ok, err := g.journalExists(); err != nil {
		return err
	} else if !ok {
		return g.noJournal()
	}
	j, err := g.openJournal(true)
	if err != nil {
		return err
	}
	defer j.Close()
	t, err := j.Txn(id)
	if err != nil {
		return err
	}
	recs, err := j.Records(id)
	if err != nil {
		return err
	}
	d := txnDetail{txnInfo: txnSummary(t, recs), EtcdBackupFile: etcdBackupOf(t.EtcdBackup), RollbackReport: rollbackReportOf(t.Detail), EtcdPath: etcdPathOf(recs), Records: recordsOut(recs)}
	if g.json() {
		return g.write(d)
	}
	return d.print(g.stdout, g.cmdline)
}

// stamp is a record's time in the detail: to the millisecond.
const stamp = "2006-01-02T15:04:05.000Z07:00"

func (d *txnDetail) print(w io.Writer, cmdline func(string) string) error {
	field := func(label, format string, args ...any) {
		v := fmt.Sprintf(format, args...)
		fmt.Fprintf(w, "%-14s%s\n", label+":", strings.ReplaceAll(v, "\n", "\n"+strings.Repeat(" ", 14)))
	}
	field("transaction", "%s", d.ID)
	field("kind", "%s", d.Kind)
	field("phase", "%s", d.Phase)
	field("outcome", "%s", outcomeText(d.Phase, d.To, cmdline))
	field("versions", "%s -> %s", orDash(d.From), orDash(d.To))
	field("started", "%s", d.Started.Format(time.RFC3339))
	if d.Ended != nil {
		field("ended", "%s (took %s)", d.Ended.Format(time.RFC3339), d.Duration)
	} else {
		field("ended", "not yet (%s)", d.Duration)
	}
	field("planned", "%s", list(d.Planned))
	field("written", "%s", list(d.Written))
	field("snapshot", "%s", orDash(d.SnapshotDir))
	switch b := d.EtcdBackupFile; {
	case b != nil:
		field("etcd backup", "%s (revision %d, %d bytes, etcd %s, taken %s)", b.Path, b.Revision, b.Size, b.Version, b.Taken.Format(time.RFC3339))
	case d.EtcdBackup:
		field("etcd backup", "taken (its record does not decode; --output json has the rest)")
	default:
		field("etcd backup", "none")
	}
	field("reason", "%s", orDash(d.Reason))
	if p := d.EtcdPath; p != nil {
		field("etcd data", "%s: %s", p.Path, p.Why)
	}
	for i, c := range d.IgnoredChecks {
		label := ""
		if i == 0 {
			label = "ignored:"
		}
		fmt.Fprintf(w, "%-14s[%s] %s\n", label, c.Check, c.Message)
	}
	if d.RollbackReport != nil {
		fmt.Fprintln(w, "\nafter the failed rollback:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  COMPONENT\tMANIFEST\tACTIVE\tPROCESSES (pid/start ticks)\tERROR")
		for _, c := range d.RollbackReport {
			ps := make([]string, len(c.Processes))
			for i, p := range c.Processes {
				ps[i] = fmt.Sprintf("%d/%d", p.PID, p.StartTicks)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Component, c.Manifest, yesNo(c.Active), list(ps), orDash(c.Error))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nsteps (the journal's records, docs/journal.md):")
	if len(d.Records) == 0 {
		fmt.Fprintln(w, "  none")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SEQ\tTIME\tPHASE\tCOMPONENT\tSTEP")
	for _, r := range d.Records {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.Format(stamp), r.Phase, orDash(r.Component), recordText(r))
	}
	return tw.Flush()
}

// outcomeText says how a transaction in phase p ended, or that it is
// open; to is its target version.
func outcomeText(p journal.Phase, to *string, cmdline func(string) string) string {
	switch p {
	case journal.PhaseCommitted:
		return "committed: the node state became " + orDash(to)
	case journal.PhaseRolledBack:
		return "rolled back: the node was put back as it was before, verified"
	case journal.PhaseRollbackFailed:
		return "rollback failed: it was left for an operator (docs/operations.md#rollback-failed-exit-4)"
	}
	return "open: `" + cmdline("resume") + "` continues it, `" + cmdline("rollback") + "` undoes it"
}

// recordText says what a record means, for an operator.
func recordText(r recordJSON) string {
	switch journal.Step(orDash(r.Step)) {
	case journal.StepMark:
		s := "mark: about to write the manifest"
		if r.Stamp != nil {
			s += ", restarted-at " + *r.Stamp
		}
		if r.ProcMark != nil {
			s += fmt.Sprintf(" (processes started after tick %d are new)", r.ProcMark.Ticks)
		}
		return s
	case journal.StepReplaced:
		return "replaced: kubelet started a new process"
	case journal.StepDone:
		ps := make([]string, len(r.Processes))
		for i, p := range r.Processes {
			ps[i] = fmt.Sprintf("%d/%d", p.PID, p.StartTicks)
		}
		return "done: replaced and answering, pid/start ticks " + list(ps)
	case journal.StepRestored:
		return "restored: the manifest snapshot was written back"
	case journal.StepEtcdRestored:
		return "etcd-restored: etcd's data restored from its backup; the data it ran on is at " + orDash(r.AsideDir)
	case journal.StepEtcdData:
		return fmt.Sprintf("etcd-data: etcd's data is %s: %s", orDash(r.EtcdData), orDash(r.Why))
	case journal.StepEtcdAnswered:
		return "etcd-answered: the new etcd answered, so it wrote to the data"
	case journal.StepEtcdSilent:
		return "etcd-silent: the wait for the new etcd ended without an answer"
	case journal.StepEtcdDowngraded:
		return "etcd-downgraded: etcd's downgrade protocol moved the data back: " + orDash(r.Why)
	case journal.StepEtcdDowngradeEnable:
		return "etcd-downgrade-enable: this transaction's etcd downgrade: " + orDash(r.Why)
	case journal.StepVerified:
		return "verified: every component stayed active through the soak"
	}
	return orDash(r.Step)
}
