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
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

func newFinishCmd(g *globals) *cobra.Command {
	var ignore []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "finish [--dry-run]",
		Short: "Take a two-step minor upgrade's finishing step: stop emulating the older minor",
		Long: `finish takes the finishing step of the node's two-step minor upgrade (run --to
VERSION --two-step took the binary step: kube-apiserver, kube-controller-manager
and kube-scheduler run the new minor's binaries with --emulated-version at the
old minor). It drops --emulated-version from the three, as one journaled
transaction with the waits, verification and rollback of run: they then serve
the new minor's APIs and features.

What each step lets you undo (KEP-4330):
  - before finish, 'rollback --last' of the binary step puts the old binaries
    back: they read everything the new ones stored while emulating;
  - after finish, 'rollback --last' of it lowers the emulated version again;
    going back to the old binaries is refused (pre-flight check
    EmulationFinished, which cannot be ignored): the new minor may have
    stored what the old one cannot read.

'status' says when a two-step upgrade waits for its finishing step. On a
multi-member cluster finish waits until every control-plane node runs the new
binaries (pre-flight check EmulationClusterSkew). With no two-step upgrade to
finish it prints "nothing to do" and exits 0.

` + exitCodesHelp,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			opts, err := upgradeOptions(ignore)
			if err != nil {
				return err
			}
			if dryRun {
				return g.showPlan(planInput{label: "finishing step", opts: &opts,
					plan: func(store *manifest.Store, st *nodestate.NodeState) (*engine.Plan, error) {
						to, err := engine.FinishState(st)
						if err != nil {
							return nil, err
						}
						return engine.PlanState(context.Background(), store, g.scanner, st, to, opts)
					}})
			}
			return g.drive("finish", func(ctx context.Context, e *engine.Engine, _ *journal.Journal) (engine.Result, error) {
				res, err := e.Finish(ctx, opts)
				g.preflightRefused(err)
				return res, err
			})
		}),
	}
	preflightFlag(cmd, &ignore)
	g.criFlags(cmd, true, true)
	dryRunFlag(cmd, &dryRun, "the pre-flight checks and what the finishing step would change")
	return cmd
}

// finishHint adds to run's "nothing to do" on a node whose two-step
// upgrade waits for its finishing step what takes it: running the same
// version again is what a kubectl user tries first.
func (g *globals) finishHint(st *nodestate.NodeState, err error) error {
	ts, ok := versions.PendingTwoStep(resolve.Resolve(st))
	if !ok || !errors.Is(err, engine.ErrNothingToDo) {
		return err
	}
	return fmt.Errorf("%w; the node runs %s binaries emulating %s: `%s` takes the two-step upgrade's finishing step", err, ts.Binary, ts.Emulated, g.cmdline("finish"))
}
