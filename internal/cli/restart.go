package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

func newRestartCmd(g *globals) *cobra.Command {
	var all, changed, dryRun bool
	cmd := &cobra.Command{
		Use:   "restart (COMPONENT... | --all | --changed) [--dry-run]",
		Short: "Restart components one at a time as one journaled transaction, waiting for each",
		Long: `restart restarts the named components (or every one with --all) as one
journaled transaction, in roster order whatever the order given: snapshot the
manifests; for each component, remove its manifest, wait for the old process to
exit, write its render with a new restarted-at stamp, wait for kubelet to start
the new process and for it to answer; verify every component through the soak;
commit. The node state does not change. A failure rolls back to the snapshot
(which restarts the components written once more); a crash is finished by
resume. etcd's data is neither backed up nor restored: the same etcd runs on it.

A manifest edited by hand is put back as the node state renders it. Output,
JSON, exit codes and the transaction flags are run's.

restart --changed restarts exactly the components whose manifest is not the
render of the node state: those whose start-only input files (certificates,
keys, kubeconfigs; docs/component-inputs.md) changed since they were written,
after a certificate rotation, and any manifest edited by hand. It is apply of
the node state the journal holds; plan --state of that state shows the same
diff. Nothing changed prints "nothing to do".

` + exitCodesHelp,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			switch {
			case all && changed:
				return cmdLineErrorf("restart: --all and --changed are exclusive")
			case (all || changed) && len(args) > 0:
				return cmdLineErrorf("restart: name components, or give --all or --changed, not both")
			case !all && !changed && len(args) == 0:
				return cmdLineErrorf("restart: name the components to restart (%s), or give --all or --changed", list(manifest.Names))
			}
			for _, a := range args {
				if !manifest.IsName(a) {
					return cmdLineErrorf("restart: unknown component %q (known: %s)", a, list(manifest.Names))
				}
			}
			if dryRun {
				return g.verbDryRun("restart", func(store *manifest.Store, st *nodestate.NodeState) (*engine.Plan, error) {
					if !changed {
						return engine.PlanRestart(store, st, args, store.Stamp())
					}
					p, err := engine.PlanState(context.Background(), store, g.scanner, st, st, engine.UpgradeOptions{})
					if errors.Is(err, engine.ErrNothingToDo) {
						err = errNothingChanged
					}
					return p, err
				})
			}
			return g.drive("restart", func(ctx context.Context, e *engine.Engine, j *journal.Journal) (engine.Result, error) {
				if !changed {
					return e.Restart(ctx, args)
				}
				st, err := nodeState(j)
				if err != nil {
					return engine.Result{}, err
				}
				res, err := e.Apply(ctx, st, engine.UpgradeOptions{})
				if errors.Is(err, engine.ErrNothingToDo) {
					err = errNothingChanged
				}
				return res, err
			})
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "restart every component of the node")
	cmd.Flags().BoolVar(&changed, "changed", false, "restart exactly the components whose manifest is not the render of the node state (rotated start-only inputs, hand edits)")
	dryRunFlag(cmd, &dryRun, "the components it would restart")
	g.criFlags(cmd, true, true)
	return cmd
}

// errNothingChanged is restart --changed with every manifest the render
// of the node state.
var errNothingChanged = fmt.Errorf("%w: every component's manifest is the render of the node state, and no start-only input file changed since it was written", engine.ErrNothingToDo)
