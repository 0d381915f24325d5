package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
)

func newHistoryCmd(g *globals) *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "history [TXN]",
		Short: "List the transactions in the journal, newest first, or show one with its records",
		Long: `history lists every transaction in the journal, newest first: id, kind, phase,
start, duration, versions, the components it changed and why it rolled back.
With a transaction id it shows that transaction and every journaled record
(docs/journal.md explains them). The journal is opened read-only.`,
		Args: cobra.MaximumNArgs(1),
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if ok, err := g.journalExists(); err != nil {
				return err
			} else if !ok && len(args) == 0 {
				if g.json() {
					return writeJSON(g.stdout, []txnInfo{})
				}
				fmt.Fprintf(g.stdout, "no transactions: no journal at %s (nothing was imported or upgraded on this node)\n", g.journalPath())
				return nil
			}
			j, err := g.openJournal(true)
			if err != nil {
				return err
			}
			defer j.Close()
			if len(args) == 1 {
				return g.showTxn(j, args[0])
			}
			hist, err := j.History(limit)
			if err != nil {
				return err
			}
			infos := make([]txnInfo, len(hist))
			for i := range hist {
				infos[i] = txnSummary(&hist[i])
			}
			if g.json() {
				return writeJSON(g.stdout, infos)
			}
			if len(infos) == 0 {
				fmt.Fprintln(g.stdout, "no transactions")
				return nil
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tPHASE\tSTARTED\tDURATION\tFROM\tTO\tCHANGED\tREASON")
			for _, t := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.Phase, t.Started.Format(time.RFC3339), t.Duration,
					orDash(t.From), orDash(t.To), list(t.Changed), orDash(t.Reason))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many transactions (0: all)")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// txnDetail is history TXN's JSON output.
type txnDetail struct {
	txnInfo
	Detail  json.RawMessage  `json:"detail,omitempty"`
	Records []journal.Record `json:"records"`
}

func (g *globals) showTxn(j *journal.Journal, id string) error {
	t, err := j.Txn(id)
	if err != nil {
		return err
	}
	recs, err := j.Records(id)
	if err != nil {
		return err
	}
	d := txnDetail{txnInfo: txnSummary(t), Records: recs}
	if d.Records == nil {
		d.Records = []journal.Record{}
	}
	if json.Valid(t.Detail) {
		d.Detail = t.Detail
	}
	if g.json() {
		return writeJSON(g.stdout, d)
	}
	w := g.stdout
	fmt.Fprintf(w, "transaction:  %s\nkind:         %s\nphase:        %s\n", t.ID, t.Kind, t.Phase)
	fmt.Fprintf(w, "started:      %s\n", t.Started.Format(time.RFC3339Nano))
	if !t.Ended.IsZero() {
		fmt.Fprintf(w, "ended:        %s (%s)\n", t.Ended.Format(time.RFC3339Nano), d.Duration)
	}
	fmt.Fprintf(w, "versions:     %s -> %s\nchanged:      %s\n", orDash(d.From), orDash(d.To), list(d.Changed))
	fmt.Fprintf(w, "snapshot:     %s\n", orDash(t.SnapshotDir))
	if len(t.EtcdBackup) > 0 {
		fmt.Fprintf(w, "etcd backup:  %s\n", t.EtcdBackup)
	}
	if t.Reason != "" {
		fmt.Fprintf(w, "reason:       %s\n", t.Reason)
	}
	for i, c := range t.IgnoredChecks {
		head := "              "
		if i == 0 {
			head = "ignored:      "
		}
		fmt.Fprintf(w, "%s[%s] %s\n", head, c.Check, c.Message)
	}
	if len(d.Detail) > 0 {
		var pretty bytes.Buffer
		if json.Indent(&pretty, d.Detail, "              ", "  ") == nil {
			fmt.Fprintf(w, "detail:       %s\n", pretty.String())
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tPHASE\tSTEP\tCOMPONENT\tMARK\tSTAMP\tDETAIL")
	for _, r := range recs {
		mark := "-"
		if r.ProcMark != nil {
			mark = fmt.Sprintf("tick %d", r.ProcMark.Ticks)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.Format(time.RFC3339Nano), r.Phase, orDash(string(r.Step)), orDash(r.Component), mark, orDash(r.Stamp), orDash(recordDetail(r)))
	}
	return tw.Flush()
}

func newAuditCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "audit [COMPONENT]",
		Short: "Show the container spec kubelet was handed: argv and environment, read from the manifest file",
		Long: `audit reads the manifest FILE of COMPONENT (or of every component of the roster,
or every manifest present when the journal cannot be read) and prints the
container's argv and declared environment: what kubelet was handed, out-of-band
edits included, not what stratum would render. The image's own ENV layer is not
visible in a manifest.`,
		Args: cobra.MaximumNArgs(1),
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
			if err != nil {
				return err
			}
			var names []string
			if len(args) == 1 {
				if !manifest.IsName(args[0]) {
					return usagef("audit: unknown component %q (known: %s)", args[0], strings.Join(manifest.Names, ", "))
				}
				names = args
			} else {
				names = g.auditRoster(store)
			}
			type entry struct {
				Component string            `json:"component"`
				Path      string            `json:"path"`
				Command   []string          `json:"command"`
				Argv      []string          `json:"argv"`
				Env       map[string]string `json:"env"`
			}
			var out []entry
			for _, name := range names {
				spec, err := store.ReadContainerSpec(name)
				if err != nil {
					return fmt.Errorf("audit %s: %w", name, err)
				}
				out = append(out, entry{Component: name, Path: store.Path(name), Command: nonNil(spec.Command), Argv: nonNil(spec.Argv), Env: spec.Env})
			}
			if g.json() {
				if out == nil {
					out = []entry{}
				}
				return writeJSON(g.stdout, out)
			}
			for i, e := range out {
				if i > 0 {
					fmt.Fprintln(g.stdout)
				}
				fmt.Fprintf(g.stdout, "%s (%s)\n  argv:\n", e.Component, e.Path)
				for _, a := range e.Argv {
					fmt.Fprintf(g.stdout, "    %s\n", a)
				}
				fmt.Fprintln(g.stdout, "  env:")
				if len(e.Env) == 0 {
					fmt.Fprintln(g.stdout, "    (none declared)")
				}
				for _, k := range slices.Sorted(maps.Keys(e.Env)) {
					fmt.Fprintf(g.stdout, "    %s=%s\n", k, e.Env[k])
				}
			}
			return nil
		}),
	}
}

// auditRoster is the node's roster from the journal (read-only); without a
// readable journal, every component whose manifest is present.
func (g *globals) auditRoster(store *manifest.Store) []string {
	if ok, _ := g.journalExists(); ok {
		if j, err := g.openJournal(true); err == nil {
			defer j.Close()
			if st, err := j.NodeState(); err == nil {
				return manifest.NamesFor(st)
			}
		} else {
			g.log.Warn("journal not readable; auditing every manifest present", "err", err)
		}
	}
	var names []string
	for _, n := range manifest.Names {
		if ok, err := store.Exists(n); err == nil && ok {
			names = append(names, n)
		}
	}
	return names
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the Go version and the journal schema version",
		Args:  cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			schema := journal.CurrentSchemaVersion
			v := map[string]any{"version": Version, "go": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH, "journalSchema": schema}
			if g.json() {
				return writeJSON(g.stdout, v)
			}
			fmt.Fprintf(g.stdout, "stratum-upgrade %s\ngo: %s %s/%s\njournal schema: %d\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, schema)
			return nil
		}),
	}
}

// recordDetail is a record's payload as an operator reads it: the
// processes of a done step, the aside directory of an etcd restore.
func recordDetail(r journal.Record) string {
	switch {
	case len(r.Processes) > 0:
		out := make([]string, len(r.Processes))
		for i, p := range r.Processes {
			out[i] = fmt.Sprintf("pid %d@%d", p.PID, p.StartTicks)
		}
		return strings.Join(out, ",")
	case r.AsideDir != "":
		return "aside " + r.AsideDir
	}
	return ""
}
