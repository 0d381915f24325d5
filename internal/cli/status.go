package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

func newStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the open transaction, each component's manifest and processes, and stray files",
		Long: `status shows the open transaction and its phase (or the last one), and for
every component of the node's roster: whether its manifest is present and
matches the render of the node state ("rendered"), of an open upgrade's target
state ("target"), neither ("differs") or is "missing"; the pids and start ticks
of its processes; and whether it answers its health endpoint ("active"). It
lists stray files in the manifest directory.

It opens the journal read-only. While a run, resume or rollback holds the
journal, status says so and shows that command's last progress event from
<state-dir>/progress.json instead of the journal's view.`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			rep, err := g.status()
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(g.stdout, rep)
			}
			rep.print(g.stdout)
			return nil
		}),
	}
}

// txnInfo is a transaction as status and history show it.
type txnInfo struct {
	ID          string        `json:"id"`
	Kind        string        `json:"kind"`
	Phase       journal.Phase `json:"phase"`
	Started     time.Time     `json:"started"`
	Updated     time.Time     `json:"updated"`
	Ended       time.Time     `json:"ended,omitzero"`
	Duration    string        `json:"duration"`
	From        string        `json:"from,omitempty"`
	To          string        `json:"to,omitempty"`
	Changed     []string      `json:"changed"`
	SnapshotDir string        `json:"snapshotDir,omitempty"`
	EtcdBackup  bool          `json:"etcdBackup"`
	Reason      string        `json:"reason,omitempty"`
	// IgnoredChecks are the failed pre-flight checks the transaction was
	// let through with (--ignore-preflight-errors).
	IgnoredChecks []journal.IgnoredCheck `json:"ignoredChecks,omitempty"`
}

func txnSummary(t *journal.Txn) txnInfo {
	info := txnInfo{
		ID: t.ID, Kind: t.Kind, Phase: t.Phase, Started: t.Started, Updated: t.Updated, Ended: t.Ended,
		Changed: nonNil(t.Changed), SnapshotDir: t.SnapshotDir, EtcdBackup: len(t.EtcdBackup) > 0, Reason: t.Reason,
		IgnoredChecks: t.IgnoredChecks,
	}
	end := t.Ended
	if end.IsZero() {
		end = time.Now()
		info.Duration = "open " + end.Sub(t.Started).Round(time.Second).String()
	} else {
		info.Duration = end.Sub(t.Started).Round(time.Millisecond).String()
	}
	if st, err := nodestate.Parse(t.From); err == nil {
		info.From = st.KubernetesVersion
	}
	if st, err := nodestate.Parse(t.To); err == nil {
		info.To = st.KubernetesVersion
	}
	return info
}

// componentStatus is one component in status.
type componentStatus struct {
	Component string `json:"component"`
	// InRoster is null when the roster is unknown (journal locked).
	InRoster *bool  `json:"inRoster"`
	Path     string `json:"path"`
	// Manifest is rendered, target, differs, missing, present (not compared:
	// the journal is locked) or unreadable.
	Manifest  string      `json:"manifest"`
	Health    string      `json:"health,omitempty"`
	Processes []procEntry `json:"processes"`
	Active    bool        `json:"active"`
	Error     string      `json:"error,omitempty"`
}

type procEntry struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"`
}

type nodeInfo struct {
	Name              string   `json:"name"`
	KubernetesVersion string   `json:"kubernetesVersion"`
	Roster            []string `json:"roster"`
}

// statusReport is status's output.
type statusReport struct {
	Journal     string `json:"journal"`
	NoJournal   bool   `json:"noJournal,omitempty"`
	Locked      bool   `json:"locked,omitempty"`
	LockedError string `json:"lockedError,omitempty"`
	// Progress is the running command's progress file, shown while the
	// journal is locked.
	Progress      *Progress         `json:"progress,omitempty"`
	ProgressAlive bool              `json:"progressPidAlive,omitempty"`
	Node          *nodeInfo         `json:"node,omitempty"`
	NodeError     string            `json:"nodeError,omitempty"`
	Open          *txnInfo          `json:"openTransaction,omitempty"`
	LastRecord    *journal.Record   `json:"lastRecord,omitempty"`
	Last          *txnInfo          `json:"lastTransaction,omitempty"`
	ManifestDir   string            `json:"manifestDir"`
	ManifestError string            `json:"manifestDirError,omitempty"`
	Components    []componentStatus `json:"components"`
	Strays        []string          `json:"strays"`
}

func (g *globals) status() (*statusReport, error) {
	rep := &statusReport{Journal: g.journalPath(), ManifestDir: g.manifestDir, Components: []componentStatus{}, Strays: []string{}}
	var st *nodestate.NodeState
	var open *journal.Txn
	exists, err := g.journalExists()
	if err != nil {
		return nil, err
	}
	if !exists {
		rep.NoJournal = true
	} else {
		j, err := g.openJournal(true)
		switch {
		case errors.Is(err, journal.ErrLocked):
			rep.Locked, rep.LockedError = true, err.Error()
			if rep.Progress, err = readProgress(g.progressPath()); err != nil {
				g.log.Warn("progress file unreadable", "err", err)
			}
			if rep.Progress != nil {
				rep.ProgressAlive = alive(rep.Progress.PID)
			}
		case err != nil:
			return nil, err
		default:
			defer j.Close()
			if st, err = j.NodeState(); err != nil {
				rep.NodeError = err.Error()
				st = nil
			}
			if open, err = j.OpenTxn(); err != nil {
				return nil, err
			}
			if open != nil {
				info := txnSummary(open)
				rep.Open = &info
				if recs, err := j.Records(open.ID); err == nil && len(recs) > 0 {
					rep.LastRecord = &recs[len(recs)-1]
				}
			} else if hist, err := j.History(1); err == nil && len(hist) > 0 {
				info := txnSummary(&hist[0])
				rep.Last = &info
			}
		}
	}
	if st != nil {
		rep.Node = &nodeInfo{Name: st.NodeName, KubernetesVersion: st.KubernetesVersion, Roster: manifest.NamesFor(st)}
	}
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		rep.ManifestError = strings.TrimPrefix(err.Error(), "manifest dir: ")
		return rep, nil
	}
	if rep.Strays, err = store.Strays(); err != nil {
		rep.ManifestError = err.Error()
	}
	rep.Strays = nonNil(rep.Strays)
	var target *nodestate.NodeState
	if open != nil && open.Kind == journal.KindUpgrade {
		target, _ = nodestate.Parse(open.To)
	}
	for _, name := range manifest.Names {
		if c, ok := g.component(store, st, target, name); ok {
			rep.Components = append(rep.Components, c)
		}
	}
	return rep, nil
}

// component is name's status; ok is false for a component outside the
// roster that has no manifest (nothing to show).
func (g *globals) component(store *manifest.Store, st, target *nodestate.NodeState, name string) (componentStatus, bool) {
	c := componentStatus{Component: name, Path: store.Path(name), Processes: []procEntry{}}
	inRoster := st != nil && slices.Contains(manifest.NamesFor(st), name)
	if st != nil {
		c.InRoster = &inRoster
	}
	b, err := store.Read(name)
	switch {
	case errors.Is(err, manifest.ErrNoManifest):
		c.Manifest = "missing"
	case err != nil:
		c.Manifest, c.Error = "unreadable", err.Error()
	case st == nil:
		c.Manifest = "present"
	default:
		c.Manifest = "differs"
		if matchesRender(st, name, b) {
			c.Manifest = "rendered"
		} else if target != nil && matchesRender(target, name, b) {
			c.Manifest = "target"
		}
	}
	if !inRoster && c.Manifest == "missing" {
		return c, false
	}
	// Processes: found by the binary name, checked on the port of the
	// state that has the component in its roster.
	var tst *nodestate.NodeState
	switch {
	case inRoster:
		tst = st
	case target != nil && slices.Contains(manifest.NamesFor(target), name):
		tst = target
	}
	if tst == nil {
		return c, true
	}
	t, err := manifest.Target(tst, name)
	if err != nil {
		c.Error = err.Error()
		return c, true
	}
	c.Health = t.Health
	ps, err := g.scanner.PIDs(t.Binary)
	if err != nil {
		c.Error = err.Error()
	}
	for _, p := range ps {
		c.Processes = append(c.Processes, procEntry{PID: p.PID, StartTicks: p.StartTicks})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c.Active = g.scanner.Active(ctx, t)
	return c, true
}

// matchesRender reports whether b is the render of name from st, with the
// restarted-at stamp b carries.
func matchesRender(st *nodestate.NodeState, name string, b []byte) bool {
	return manifest.MatchesRender(st, name, b)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (rep *statusReport) print(w io.Writer) {
	fmt.Fprintf(w, "journal:      %s\n", rep.Journal)
	switch {
	case rep.NoJournal:
		fmt.Fprintln(w, "              does not exist: nothing was imported on this node (`stratum-upgrade init --state FILE`)")
	case rep.Locked:
		p := rep.Progress
		if p == nil || p.Finished || !rep.ProgressAlive {
			fmt.Fprintln(w, "              locked by another process: the journal cannot be read until it lets go")
		} else {
			fmt.Fprintln(w, "              locked by a running stratum-upgrade: the journal cannot be read until it ends; its progress:")
		}
		if p != nil {
			state := "running"
			switch {
			case p.Finished:
				state = "finished: " + p.Outcome + "; the lock holder is another command"
			case !rep.ProgressAlive:
				state = "no longer running; the lock holder is another command"
			}
			fmt.Fprintf(w, "progress:     %s (pid %d, %s), started %s, updated %s\n", p.Command, p.PID, state, p.Started.Format(time.RFC3339), p.Updated.Format(time.RFC3339))
			if ev := p.Event; ev != nil {
				msg := ev.Message
				if ev.Component != "" {
					msg = ev.Component + ": " + msg
				}
				fmt.Fprintf(w, "last event:   txn %s, phase %s: %s\n", ev.Txn, ev.Phase, msg)
				if ev.Waiting != "" && !p.Finished {
					fmt.Fprintf(w, "waiting for:  %s\n", ev.Waiting)
				}
			}
		}
	}
	if rep.NodeError != "" {
		fmt.Fprintf(w, "node:         %s\n", rep.NodeError)
	}
	if n := rep.Node; n != nil {
		fmt.Fprintf(w, "node:         %s, Kubernetes %s, roster %s\n", n.Name, n.KubernetesVersion, strings.Join(n.Roster, ", "))
	}
	if t := rep.Open; t != nil {
		fmt.Fprintf(w, "transaction:  %s %s OPEN in phase %s, started %s (%s)\n", t.ID, t.Kind, t.Phase, t.Started.Format(time.RFC3339), t.Duration)
		if t.From != "" || t.To != "" {
			fmt.Fprintf(w, "              %s -> %s, changing %s\n", t.From, t.To, list(t.Changed))
		}
		if r := rep.LastRecord; r != nil {
			fmt.Fprintf(w, "              last journaled step: %s %s %s at %s\n", r.Phase, r.Step, r.Component, r.Time.Format(time.RFC3339))
		}
		if t.Reason != "" {
			fmt.Fprintf(w, "              reason: %s\n", t.Reason)
		}
		fmt.Fprintln(w, "              `stratum-upgrade resume` continues it; `stratum-upgrade rollback` undoes it")
	} else if !rep.NoJournal && !rep.Locked {
		if t := rep.Last; t != nil {
			fmt.Fprintf(w, "transaction:  none open; last %s %s %s, ended %s\n", t.ID, t.Kind, t.Phase, t.Ended.Format(time.RFC3339))
			if t.Reason != "" {
				fmt.Fprintf(w, "              reason: %s\n", t.Reason)
			}
		} else {
			fmt.Fprintln(w, "transaction:  none")
		}
	}
	fmt.Fprintf(w, "manifest dir: %s\n", rep.ManifestDir)
	if rep.ManifestError != "" {
		fmt.Fprintf(w, "              %s\n", rep.ManifestError)
	}
	if len(rep.Components) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "COMPONENT\tROSTER\tMANIFEST\tACTIVE\tPROCESSES (pid/start ticks)")
		for _, c := range rep.Components {
			var ps []string
			for _, p := range c.Processes {
				ps = append(ps, fmt.Sprintf("%d/%d", p.PID, p.StartTicks))
			}
			procs := list(ps)
			if c.Error != "" {
				procs += " (" + c.Error + ")"
			}
			roster := "?"
			if c.InRoster != nil {
				roster = yesNo(*c.InRoster)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Component, roster, c.Manifest, yesNo(c.Active), procs)
		}
		tw.Flush()
	}
	printStrays(w, rep.ManifestDir, rep.Strays)
	for _, s := range rep.Strays {
		if leftover, _ := manifest.IsStagingLeftover(s); leftover {
			fmt.Fprintf(w, "              %s is a staging leftover: the next render or write sweeps it\n", s)
		}
	}
}
