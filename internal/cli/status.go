package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

func newStatusCmd(g *globals) *cobra.Command {
	var ofCluster bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the open transaction, each component's manifest and processes, and stray files",
		Long: `status shows the open transaction and its phase (or the last one), and for
every component of the node's roster: whether its manifest is present and
matches the render of the node state ("rendered"), of an open upgrade's target
state ("target"), the render but for a file the component reads only at start
that changed since ("inputs-changed"), none of these ("differs") or is
"missing"; the pids and start ticks
of its processes; and whether it answers its health endpoint ("active"). It
lists stray files in the manifest directory.

It opens the journal read-only. While a run, resume or rollback holds the
journal, status says so and shows that command's last progress event from
<state-dir>/progress.json instead of the journal's view.

status --cluster shows, on a node of a multi-member etcd cluster, the rollout
as the cluster's etcd holds it: which node holds the rollout lock, whether the
rollout is halted (and by which node's transaction), and every node's last
transaction and its phase.`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if ofCluster {
				return g.statusCluster()
			}
			rep, err := g.status()
			if err != nil {
				return err
			}
			if g.json() {
				return g.write(rep)
			}
			rep.print(g.stdout, g.cmdline)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&ofCluster, "cluster", false, "show the rollout of a multi-member cluster from its etcd: the lock, a halt, every node's last transaction")
	return cmd
}

// componentStatus is one component in status.
type componentStatus struct {
	Component string `json:"component"`
	// InRoster is null when the roster is unknown (journal locked).
	InRoster *bool  `json:"inRoster"`
	Path     string `json:"path"`
	// Manifest is rendered, target, inputs-changed (the render but for a
	// start-only input file that changed since), differs, missing, present
	// (not compared: the journal is locked) or unreadable.
	Manifest string `json:"manifest"`
	// Health is the endpoint active is checked on; null when the component
	// is in no known roster or has none (kube-vip: its process running is
	// what active means).
	Health    *string       `json:"health"`
	Processes []processJSON `json:"processes"`
	// Foreign are processes of the component's binary that are not its
	// (outside the node's static pods: proc.Scanner.Identify); nothing
	// waits on them or stops them.
	Foreign []processJSON `json:"foreign"`
	Active  bool          `json:"active"`
	Error   *string       `json:"error"`
}

type nodeInfo struct {
	Name              string   `json:"name"`
	KubernetesVersion string   `json:"kubernetesVersion"`
	Roster            []string `json:"roster"`
	// Stopped are the components stop stopped (not in Roster).
	Stopped []string `json:"stopped"`
	// TwoStep is the node's two-step upgrade whose binary step is taken
	// and whose finishing step is not; null when none.
	TwoStep *versions.TwoStep `json:"twoStep"`
}

// statusReport is status's output (docs/schemas/status.json). Every field
// is always there: null when unknown or unset.
type statusReport struct {
	Journal   string `json:"journal"`
	NoJournal bool   `json:"noJournal"`
	Locked    bool   `json:"locked"`
	// LockedError says why the journal could not be read; null unless
	// locked.
	LockedError *string `json:"lockedError"`
	// Progress is the running command's progress file, shown while the
	// journal is locked; ProgressAlive says whether its pid still runs.
	Progress      *progressJSON `json:"progress"`
	ProgressAlive bool          `json:"progressPidAlive"`
	Node          *nodeInfo     `json:"node"`
	// NodeError says why the journal's node state could not be read.
	NodeError     *string           `json:"nodeError"`
	Open          *txnInfo          `json:"openTransaction"`
	LastRecord    *recordJSON       `json:"lastRecord"`
	Last          *txnInfo          `json:"lastTransaction"`
	ManifestDir   string            `json:"manifestDir"`
	ManifestError *string           `json:"manifestDirError"`
	Components    []componentStatus `json:"components"`
	Strays        []string          `json:"strays"`
	// Surges are the surge copies in the manifest directory
	// (<component>-surge.yaml): a surge in progress, or one an
	// interrupted transaction left for resume or rollback to remove.
	Surges []string `json:"surges"`
	// kubeadm: no journal, and the manifest directory holds kubeadm's
	// kube-apiserver manifest: the node is one to adopt.
	kubeadm bool
}

func (g *globals) status() (*statusReport, error) {
	rep := &statusReport{Journal: g.journalPath(), ManifestDir: g.manifestDir, Components: []componentStatus{}, Strays: []string{}, Surges: []string{}}
	var st *nodestate.NodeState
	var open *journal.Txn
	exists, err := g.journalExists()
	if err != nil {
		return nil, err
	}
	if !exists {
		rep.NoJournal = true
		rep.kubeadm = kubeadmMade(g.manifestDir)
	} else {
		j, err := g.openJournal(true)
		switch {
		case errors.Is(err, journal.ErrLocked):
			rep.Locked, rep.LockedError = true, ptr(err.Error())
			p, err := readProgress(g.progressPath())
			if err != nil {
				g.log.Warn("progress file unreadable", "err", err)
			}
			if rep.Progress = progressOut(p); p != nil {
				rep.ProgressAlive = alive(p.PID)
			}
		case err != nil:
			return nil, err
		default:
			defer j.Close()
			if st, err = j.NodeState(); err != nil {
				rep.NodeError = ptr(err.Error())
				st = nil
			}
			if open, err = j.OpenTxn(); err != nil {
				return nil, err
			}
			if open != nil {
				recs, err := j.Records(open.ID)
				if err != nil {
					return nil, err
				}
				rep.Open = ptr(txnSummary(open, recs))
				if len(recs) > 0 {
					rep.LastRecord = ptr(recordOut(recs[len(recs)-1]))
				}
			} else if hist, err := j.History(1); err == nil && len(hist) > 0 {
				info, err := txnView(j, &hist[0])
				if err != nil {
					return nil, err
				}
				rep.Last = &info
			}
		}
	}
	if st != nil {
		rep.Node = &nodeInfo{Name: st.NodeName, KubernetesVersion: st.KubernetesVersion, Roster: manifest.NamesFor(st), Stopped: nonNil(st.Stopped)}
		if ts, ok := versions.PendingTwoStep(resolve.Resolve(st)); ok {
			rep.Node.TwoStep = &ts
		}
	}
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		rep.ManifestError = ptr(strings.TrimPrefix(err.Error(), "manifest dir: "))
		return rep, nil
	}
	if rep.Strays, err = store.Strays(); err != nil {
		rep.ManifestError = ptr(err.Error())
	}
	rep.Strays = nonNil(rep.Strays)
	if surges, err := store.SurgeFiles(); err != nil {
		rep.ManifestError = ptr(err.Error())
	} else {
		rep.Surges = nonNil(surges)
	}
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
	c := componentStatus{Component: name, Path: store.Path(name), Processes: []processJSON{}, Foreign: []processJSON{}}
	inRoster := st != nil && slices.Contains(manifest.NamesFor(st), name)
	if st != nil {
		c.InRoster = &inRoster
	}
	stopped := st != nil && st.IsStopped(name)
	b, err := store.Read(name)
	switch {
	case errors.Is(err, manifest.ErrNoManifest) && stopped:
		c.Manifest = "stopped"
	case errors.Is(err, manifest.ErrNoManifest):
		c.Manifest = "missing"
	case err != nil:
		c.Manifest, c.Error = "unreadable", ptr(err.Error())
	case st == nil:
		c.Manifest = "present"
	default:
		c.Manifest = "differs"
		if matchesRender(st, name, b) {
			c.Manifest = "rendered"
		} else if target != nil && matchesRender(target, name, b) {
			c.Manifest = "target"
		} else if inputsChanged(st, name, b) {
			c.Manifest = "inputs-changed"
		}
	}
	if !inRoster && c.Manifest == "missing" {
		return c, false
	}
	// Processes: the component's by its static pod's cgroup, with the
	// binary name as the cross check (proc.Scanner.Identify), checked on
	// the port of the state that has the component in its roster.
	var tst *nodestate.NodeState
	switch {
	case inRoster:
		tst = st
	case stopped:
		// Its processes are looked for as if it ran: none should.
		tst = st.Clone()
		tst.Stopped = nil
	case target != nil && slices.Contains(manifest.NamesFor(target), name):
		tst = target
	}
	if tst == nil {
		return c, true
	}
	t, err := manifest.Target(tst, name)
	if err != nil {
		c.Error = ptr(err.Error())
		return c, true
	}
	c.Health = optional(t.Health)
	id, err := g.scanner.Identify(t)
	if err != nil {
		c.Error = ptr(err.Error())
	}
	c.Processes, c.Foreign = processesJSON(id.Ours), processesJSON(id.Foreign)
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

// inputsChanged reports whether b is the render of name from st but for
// its inputs annotation: a file the component reads only at start changed
// since b was written (manifest.InputsOnly).
func inputsChanged(st *nodestate.NodeState, name string, b []byte) bool {
	prof, err := manifest.LoadProfile(st)
	return err == nil && manifest.InputsOnly(st, prof, name, b)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (rep *statusReport) print(w io.Writer, cmdline func(string) string) {
	fmt.Fprintf(w, "journal:      %s\n", rep.Journal)
	switch {
	case rep.NoJournal && rep.kubeadm:
		fmt.Fprintf(w, "              does not exist: nothing was imported on this node; kubeadm made its manifests: `%s` shows how it would be adopted (nothing is written without --yes)\n", cmdline("init --from-kubeadm --kubeadm-config FILE"))
	case rep.NoJournal:
		fmt.Fprintf(w, "              does not exist: nothing was imported on this node (`%s`)\n", cmdline("init --state FILE"))
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
				state = "finished: " + orDash(p.Outcome) + "; the lock holder is another command"
			case !rep.ProgressAlive:
				state = "no longer running; the lock holder is another command"
			}
			fmt.Fprintf(w, "progress:     %s (pid %d, %s), started %s, updated %s\n", p.Command, p.PID, state, p.Started.Format(time.RFC3339), p.Updated.Format(time.RFC3339))
			if ev := p.Event; ev != nil {
				msg := ev.Message
				if ev.Component != nil {
					msg = *ev.Component + ": " + msg
				}
				fmt.Fprintf(w, "last event:   txn %s, phase %s: %s\n", ev.Txn, ev.Phase, msg)
				if ev.Waiting != nil && !p.Finished {
					fmt.Fprintf(w, "waiting for:  %s\n", *ev.Waiting)
				}
			}
		}
	}
	if rep.NodeError != nil {
		fmt.Fprintf(w, "node:         %s\n", *rep.NodeError)
	}
	if n := rep.Node; n != nil {
		fmt.Fprintf(w, "node:         %s, Kubernetes %s, roster %s\n", n.Name, n.KubernetesVersion, strings.Join(n.Roster, ", "))
		if ts := n.TwoStep; ts != nil {
			fmt.Fprintf(w, "two-step:     %s binaries emulating %s: `%s` raises it to %s (then going back to %s is refused); until then `%s` of the binary step goes back to %s\n",
				ts.Binary, ts.Emulated, cmdline("finish"), ts.Binary, ts.Emulated, cmdline("rollback --last"), ts.Emulated)
		}
		if len(n.Stopped) > 0 {
			fmt.Fprintf(w, "stopped:      %s (no manifest until `%s`)\n", strings.Join(n.Stopped, ", "), cmdline("start "+strings.Join(n.Stopped, " ")))
		}
	}
	if t := rep.Open; t != nil {
		fmt.Fprintf(w, "transaction:  %s %s OPEN in phase %s, started %s (%s)\n", t.ID, t.Kind, t.Phase, t.Started.Format(time.RFC3339), t.Duration)
		if t.From != nil || t.To != nil {
			fmt.Fprintf(w, "              %s -> %s, changing %s; written so far: %s\n", orDash(t.From), orDash(t.To), list(t.Planned), list(t.Written))
		}
		if r := rep.LastRecord; r != nil {
			fmt.Fprintf(w, "              last journaled step: %s %s %s at %s\n", r.Phase, orDash(r.Step), orDash(r.Component), r.Time.Format(time.RFC3339))
		}
		if t.Reason != nil {
			fmt.Fprintf(w, "              reason: %s\n", *t.Reason)
		}
		fmt.Fprintf(w, "              `%s` continues it; `%s` undoes it\n", cmdline("resume"), cmdline("rollback"))
	} else if !rep.NoJournal && !rep.Locked {
		if t := rep.Last; t != nil {
			fmt.Fprintf(w, "transaction:  none open; last %s %s %s, ended %s\n", t.ID, t.Kind, t.Phase, t.Ended.Format(time.RFC3339))
			if t.Reason != nil {
				fmt.Fprintf(w, "              reason: %s\n", *t.Reason)
			}
		} else {
			fmt.Fprintln(w, "transaction:  none")
		}
	}
	fmt.Fprintf(w, "manifest dir: %s\n", rep.ManifestDir)
	if rep.ManifestError != nil {
		fmt.Fprintf(w, "              %s\n", *rep.ManifestError)
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
			if c.Error != nil {
				procs += " (" + *c.Error + ")"
			}
			roster := "?"
			if c.InRoster != nil {
				roster = yesNo(*c.InRoster)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Component, roster, c.Manifest, yesNo(c.Active), procs)
		}
		tw.Flush()
		printForeign(w, rep.Components)
	}
	if len(rep.Surges) > 0 {
		fmt.Fprintf(w, "surge:        %s: a new instance beside the running one (a surge in progress; if no command runs, `%s` or `%s` removes it)\n", strings.Join(rep.Surges, ", "), cmdline("resume"), cmdline("rollback"))
	}
	printStrays(w, rep.ManifestDir, rep.Strays)
	for _, s := range rep.Strays {
		if leftover, _ := manifest.IsStagingLeftover(s); leftover {
			fmt.Fprintf(w, "              %s is a staging leftover: the next render or write sweeps it\n", s)
		}
	}
}

// printForeign names, per component, the processes of its binary that run
// outside the node's static pods: they explain a second etcd in ps that
// the table leaves out.
func printForeign(w io.Writer, cs []componentStatus) {
	for _, c := range cs {
		if len(c.Foreign) == 0 {
			continue
		}
		ps := make([]string, len(c.Foreign))
		for i, p := range c.Foreign {
			ps[i] = fmt.Sprintf("%d/%d", p.PID, p.StartTicks)
		}
		fmt.Fprintf(w, "foreign:      %s: %s run its binary outside the node's static pods; ignored\n", c.Component, list(ps))
	}
}

// kubeadmMade reports whether dir holds a kube-apiserver manifest that
// kubeadm wrote: it carries kubeadm's advertise-address annotation and
// none of stratum's (stratum renders kubeadm's annotation too, beside its
// own stratum.ciq.com/ ones). Anything unreadable is "no".
func kubeadmMade(dir string) bool {
	b, err := durable.ReadInput(filepath.Join(dir, nodestate.KubeAPIServer+".yaml"))
	if err != nil {
		return false
	}
	pod, err := kubeletpod.Decode(b)
	if err != nil {
		return false
	}
	for k := range pod.Annotations {
		if strings.HasPrefix(k, "stratum.ciq.com/") {
			return false
		}
	}
	_, ok := pod.Annotations[manifest.APIServerAdvertiseAddressAnnotation]
	return ok
}
