package cli

// --dry-run: the plan of a writing command, nothing written. run and
// apply print plan's (they are plan --to and plan --state); init, render,
// restart, stop and start print a dryRunReport: what would be done and
// how, and a diff of every manifest that would change
// (docs/schemas/dry-run.json).

import (
	"errors"
	"fmt"
	"path/filepath"

	udiff "github.com/aymanbagabas/go-udiff"
	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// dryRunReport is the output of a dry run (dry-run.json).
type dryRunReport struct {
	Command string `json:"command"`
	// Nothing: the command would change nothing.
	Nothing bool `json:"nothingToDo"`
	// Notes are what it would do and how, the lines the text output
	// prints above the diffs.
	Notes []string `json:"notes"`
	// Transaction: the changes would be made as one journaled transaction,
	// one component at a time with the waits (else at once).
	Transaction bool           `json:"transaction"`
	Changes     []dryRunChange `json:"changes"`
	// Removes are the manifests that would be removed because their
	// component left the roster (render, init).
	Removes []string `json:"removes"`
}

type dryRunChange struct {
	Component string `json:"component"`
	Path      string `json:"path"`
	// New: no manifest on disk now. Removed: the manifest would be gone.
	New     bool   `json:"new"`
	Removed bool   `json:"removed"`
	Diff    string `json:"diff"`
}

// note adds a line to the report's notes: "COMMAND --dry-run: ...".
func (r *dryRunReport) note(format string, args ...any) {
	r.Notes = append(r.Notes, r.Command+" --dry-run: "+fmt.Sprintf(format, args...))
}

// addChanges adds a diff of each of plan's changes, against dir's manifests;
// label names the new side ("render").
func (r *dryRunReport) addChanges(dir, label string, changes []engine.Change) {
	for _, c := range changes {
		path := filepath.Join(dir, c.Component+".yaml")
		from, to := path+"\t(on disk)", path+"\t("+label+")"
		if c.Before == nil {
			from = "/dev/null"
		}
		if c.After == nil {
			to = "/dev/null"
		}
		r.Changes = append(r.Changes, dryRunChange{Component: c.Component, Path: path, New: c.Before == nil, Removed: c.After == nil,
			Diff: udiff.Unified(from, to, string(c.Before), string(c.After))})
	}
}

// printDryRunReport writes r: the object, or the notes and the diffs.
func (g *globals) printDryRunReport(r *dryRunReport) error {
	if r.Notes == nil {
		r.Notes = []string{}
	}
	if r.Changes == nil {
		r.Changes = []dryRunChange{}
	}
	r.Removes = nonNil(r.Removes)
	if g.json() {
		return g.write(r)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(g.stdout, n)
	}
	for _, c := range r.Changes {
		if c.Diff == "" {
			continue
		}
		fmt.Fprintln(g.stdout)
		fmt.Fprint(g.stdout, c.Diff)
	}
	return nil
}

// dryRunFlag adds --dry-run to a writing command.
func dryRunFlag(cmd *cobra.Command, v *bool, what string) {
	cmd.Flags().BoolVar(v, "dry-run", false, "print what "+cmd.Name()+" would do ("+what+"), with a diff of each manifest, and write nothing")
}

// verbDryRun is restart's, stop's and start's --dry-run: the plan the
// engine would make from the journal's node state and the manifests on
// disk, both opened read-only.
func (g *globals) verbDryRun(verb string, plan func(*manifest.Store, *nodestate.NodeState) (*engine.Plan, error)) error {
	j, err := g.openJournal(true)
	if err != nil {
		return err
	}
	defer j.Close()
	if err := refuseOpenTxn(j, verb); err != nil {
		return err
	}
	st, err := nodeState(j)
	if err != nil {
		return err
	}
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		return err
	}
	rep := &dryRunReport{Command: verb}
	p, err := plan(store, st)
	if errors.Is(err, engine.ErrNothingToDo) {
		rep.Nothing = true
		rep.note("%v", err) // "nothing to do: ..." already
		return g.printDryRunReport(rep)
	}
	if err != nil {
		return err
	}
	rep.Transaction = true
	rep.note("would %s %s as one transaction in roster order, with the waits and a rollback on failure; nothing is written now", verb, list(p.Changed()))
	rep.addChanges(store.Dir(), verb, p.Changes)
	return g.printDryRunReport(rep)
}

// rollbackLastDryRun is rollback --last --dry-run: what undoing the last
// committed transaction would change, from the journal and the manifests
// opened read-only, or the refusal rollback --last would give. The etcd
// member count is the one kept beside the journal; without one, the plan
// is made as if etcd had several members, and a warning says so.
func (g *globals) rollbackLastDryRun() error {
	j, err := g.openJournal(true)
	if err != nil {
		return err
	}
	defer j.Close()
	if _, err := nodeState(j); err != nil {
		return err
	}
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		return err
	}
	members := 2
	if m, err := cluster.LoadMembers(filepath.Join(g.stateDir, cluster.MembersFile)); err == nil && m != nil {
		members = m.Count
	} else {
		fmt.Fprintf(g.stderr, "stratum-upgrade: warning: rollback --last --dry-run: etcd's member count is not known here (the real rollback --last reads it from etcd); planned as for several members\n")
	}
	rep := &dryRunReport{Command: "rollback --last"}
	p, what, err := engine.PlanRollbackLast(j, store, members)
	if errors.Is(err, engine.ErrNothingToDo) {
		rep.Nothing = true
		rep.note("%v", err)
		return g.printDryRunReport(rep)
	}
	if err != nil {
		return err
	}
	rep.Transaction = true
	rep.note("would %s, as one transaction in roster order with the waits and a rollback on failure; nothing is written now", what)
	rep.addChanges(store.Dir(), "after rollback --last", p.Changes)
	return g.printDryRunReport(rep)
}
