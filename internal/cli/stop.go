package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// verbArgs checks the components a verb names: each known, and names or
// --all, not both, not neither.
func verbArgs(verb string, args []string, all bool) error {
	switch {
	case all && len(args) > 0:
		return cmdLineErrorf("%s: name components or give --all, not both", verb)
	case !all && len(args) == 0:
		return cmdLineErrorf("%s: name the components to %s (%s), or give --all", verb, verb, list(manifest.Names))
	}
	for _, a := range args {
		if !manifest.IsName(a) {
			return cmdLineErrorf("%s: unknown component %q (known: %s)", verb, a, list(manifest.Names))
		}
	}
	return nil
}

func newStopCmd(g *globals) *cobra.Command {
	var all, down, dryRun bool
	cmd := &cobra.Command{
		Use:   "stop (COMPONENT... | --all) [--allow-control-plane-down] [--dry-run]",
		Short: "Stop components as one journaled transaction: manifests removed, processes waited out",
		Long: `stop stops the named components (or every running one with --all) as one
journaled transaction, in roster order: snapshot the manifests; for each
component remove its manifest and wait until its processes are gone (at most
--stop-timeout); verify that every component still running answers through
the soak; commit. The commit lists the components as stopped in the node
state: render, run, apply and resume leave them out, and a reboot does not
bring them back (kubelet runs no pod without a manifest). 'start' undoes it;
status shows them as stopped. A failure rolls back to the snapshot.

Stopping etcd or kube-apiserver on a node whose etcd is the cluster's only
member takes the control plane down (the API server is unreachable until
'start'): it is refused unless --allow-control-plane-down is given. A
component stopped already is nothing to do.

` + exitCodesHelp,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if err := verbArgs("stop", args, all); err != nil {
				return err
			}
			if dryRun {
				return g.stopDryRun(args, down)
			}
			return g.drive("stop", func(ctx context.Context, e *engine.Engine, _ *journal.Journal) (engine.Result, error) {
				return e.Stop(ctx, args, engine.StopOptions{AllowControlPlaneDown: down})
			})
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "stop every running component of the node")
	cmd.Flags().BoolVar(&down, "allow-control-plane-down", false, "let etcd and kube-apiserver be stopped on the only control-plane node")
	dryRunFlag(cmd, &dryRun, "the components it would stop")
	g.criFlags(cmd, true, true)
	return cmd
}

func newStartCmd(g *globals) *cobra.Command {
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:   "start (COMPONENT... | --all) [--dry-run]",
		Short: "Start stopped components as one journaled transaction, waiting until each answers",
		Long: `start starts components that 'stop' stopped (every one with --all) as one
journaled transaction, in roster order: snapshot; for each, write its manifest
rendered from the node state (with a new restarted-at stamp) and wait for
kubelet to start it and for it to answer; verify and the soak; commit, which
takes them off the node state's stopped list. A failure rolls back: the
manifests are removed again and the components stay stopped. A component that
runs already is nothing to do.

` + exitCodesHelp,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if err := verbArgs("start", args, all); err != nil {
				return err
			}
			if dryRun {
				return g.verbDryRun("start", func(store *manifest.Store, st *nodestate.NodeState) (*engine.Plan, error) {
					return engine.PlanStart(store, st, args, store.Stamp())
				})
			}
			return g.drive("start", func(ctx context.Context, e *engine.Engine, _ *journal.Journal) (engine.Result, error) {
				return e.Start(ctx, args)
			})
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "start every stopped component of the node")
	dryRunFlag(cmd, &dryRun, "the components it would start")
	g.criFlags(cmd, true, true)
	return cmd
}

// stopDryRun is stop --dry-run. Whether etcd has more than one member is
// not asked here (the real stop reads it from etcd): the plan is made as
// if --allow-control-plane-down were given, and a note says when the stop
// would need it.
func (g *globals) stopDryRun(args []string, down bool) error {
	return g.verbDryRun("stop", func(store *manifest.Store, st *nodestate.NodeState) (*engine.Plan, error) {
		p, err := engine.PlanStop(store, st, args, engine.StopOptions{AllowControlPlaneDown: true})
		if err == nil && !down {
			for _, c := range p.Changed() {
				if c == nodestate.Etcd || c == nodestate.KubeAPIServer {
					fmt.Fprintf(g.stderr, "stratum-upgrade: warning: stop --dry-run: %s: where etcd has one member, stop refuses it without --allow-control-plane-down (the API server would be unreachable)\n", c)
					break
				}
			}
		}
		return p, err
	})
}
