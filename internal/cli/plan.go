package cli

import (
	"context"
	"errors"
	"fmt"

	udiff "github.com/aymanbagabas/go-udiff"
	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// loadRelease reads and validates the release file; every failure is bad
// usage (the file is the user's input).
func loadRelease(path string) (*engine.Release, []byte, error) {
	if path == "" {
		return nil, nil, usagef("--to RELEASE is required: the release file to upgrade to")
	}
	rel, raw, err := engine.LoadRelease(path)
	if err != nil {
		return nil, nil, usage(err)
	}
	return rel, raw, nil
}

// applyRelease checks that rel applies to st (the result validates): a
// release that cannot is bad input, told apart here from the engine's
// run-time failures.
func applyRelease(rel *engine.Release, st *nodestate.NodeState, path string) error {
	if _, err := rel.Apply(st); err != nil {
		return usagef("release %s: %w", path, err)
	}
	return nil
}

func newPlanCmd(g *globals) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "plan --to RELEASE",
		Short: "Show the unified diff of every manifest an upgrade to RELEASE would change; nothing is written",
		Long: `plan computes what 'run --to RELEASE' would do against the persisted node state
and the manifests on disk, and prints a unified diff of each manifest that would
change, in roster order. It writes nothing: not the journal (opened read-only),
not the manifest directory. A release that changes nothing prints "nothing to
do" and exits 0. It is refused while a transaction is open.`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			return g.runPlan(to)
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", "release file (YAML, kind Release)")
	return cmd
}

// planReport is plan's JSON output.
type planReport struct {
	From       string       `json:"from"`
	To         string       `json:"to"`
	Nothing    bool         `json:"nothingToDo,omitempty"`
	Message    string       `json:"message,omitempty"`
	EtcdBackup bool         `json:"etcdBackup"`
	Changes    []planChange `json:"changes"`
}

type planChange struct {
	Component string `json:"component"`
	Path      string `json:"path"`
	New       bool   `json:"new,omitempty"`
	Diff      string `json:"diff"`
}

func (g *globals) runPlan(to string) error {
	rel, _, err := loadRelease(to)
	if err != nil {
		return err
	}
	j, err := g.openJournal(true)
	if err != nil {
		return err
	}
	defer j.Close()
	if err := refuseOpenTxn(j, "plan"); err != nil {
		return err
	}
	st, err := nodeState(j)
	if err != nil {
		return err
	}
	if err := applyRelease(rel, st, to); err != nil {
		return err
	}
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		return err
	}
	plan, err := engine.PlanUpgrade(context.Background(), store, g.scanner, st, rel, engine.UpgradeOptions{})
	if errors.Is(err, engine.ErrNothingToDo) {
		if g.json() {
			return writeJSON(g.stdout, planReport{From: st.KubernetesVersion, To: rel.KubernetesVersion, Nothing: true, Message: err.Error(), Changes: []planChange{}})
		}
		fmt.Fprintln(g.stdout, err)
		return nil
	}
	if err != nil {
		return err
	}
	rep := planReport{From: plan.From.KubernetesVersion, To: plan.To.KubernetesVersion, Changes: []planChange{}}
	for _, c := range plan.Changes {
		path := store.Path(c.Component)
		from := path + "\t(on disk)"
		if c.Before == nil {
			from = "/dev/null"
		}
		// Unified diff with 3 lines of context, as diff -u: "--- from",
		// "+++ to", hunks; a new manifest diffs from /dev/null.
		d := udiff.Unified(from, path+"\t(release "+rel.KubernetesVersion+")", string(c.Before), string(c.After))
		rep.Changes = append(rep.Changes, planChange{Component: c.Component, Path: path, New: c.Before == nil, Diff: d})
		rep.EtcdBackup = rep.EtcdBackup || c.Component == nodestate.Etcd
	}
	if g.json() {
		return writeJSON(g.stdout, rep)
	}
	w := g.stdout
	fmt.Fprintf(w, "upgrade %s -> %s changes %d manifest(s): %s\n", rep.From, rep.To, len(plan.Changes), list(plan.Changed()))
	if rep.EtcdBackup {
		fmt.Fprintf(w, "etcd's image changes: run takes a snapshot of etcd's data first (within --etcd-backup-timeout %s)\n", g.dl.EtcdBackup)
	}
	for _, c := range rep.Changes {
		fmt.Fprintln(w)
		fmt.Fprint(w, c.Diff)
	}
	return nil
}
