package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// loadStateFile reads, validates and test-renders the node state file
// that init, plan --state and apply --state take; every failure is bad
// usage (the file is the operator's input) and names the file.
func loadStateFile(path string) (*nodestate.NodeState, error) {
	if path == "" {
		return nil, usagef("--state FILE is required: the node state file")
	}
	st, err := nodestate.Load(path)
	var ke *nodestate.KindError
	if errors.As(err, &ke) {
		return nil, usagef("%w; --state takes a node state (kind: %s)", err, nodestate.Kind)
	}
	if err != nil {
		return nil, usage(err)
	}
	if err := checkRenders(st); err != nil {
		return nil, usagef("node state %s cannot be rendered: %w", path, err)
	}
	return st, nil
}

func newApplyCmd(g *globals) *cobra.Command {
	var state string
	var ignore []string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply --state FILE [--dry-run]",
		Short: "Change the node to the node state in FILE as one journaled transaction",
		Long: `apply changes the node to the node state in FILE the way run changes it to a
release: snapshot the manifests (and etcd's data when etcd's manifest changes),
write each changed manifest in roster order and wait for kubelet to replace the
process and the new one to answer, verify every component through the soak
window, then commit, which makes FILE the node state in the journal. Any failure
rolls back to the snapshot and the journal keeps the node state it had. 'plan
--state FILE' shows the diff first; 'run --to RELEASE' is apply of the release
applied to the current node state.

Use it for every change of node state on a running node: an extra arg, the
profile (default to cis), a moved PKI directory, new images. A field that names
the node or its etcd member (nodeName, advertiseAddress, etcd.memberName,
etcd.initialCluster, etcd.dataDir, ports.etcdPeer), configDir, and a VIP
removed are refused with the reason, nothing written (docs/operations.md).

A state that changes no manifest prints "nothing to do" and exits 0. It is
refused while a transaction is open, and runs the pre-flight checks of run.

` + exitCodesHelp,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			opts, err := upgradeOptions(ignore)
			if err != nil {
				return err
			}
			if dryRun {
				return g.runPlanState(state, opts) // plan --state FILE
			}
			to, err := loadStateFile(state)
			if err != nil {
				return err
			}
			return g.drive("apply", func(ctx context.Context, e *engine.Engine, _ *journal.Journal) (engine.Result, error) {
				res, err := e.Apply(ctx, to, opts)
				g.preflightRefused(err)
				return res, err
			})
		}),
	}
	cmd.Flags().StringVar(&state, "state", "", "node state file (YAML, kind NodeState)")
	preflightFlag(cmd, &ignore)
	g.criFlags(cmd, true, true)
	dryRunFlag(cmd, &dryRun, "plan --state FILE: the pre-flight checks and what it would change")
	return cmd
}
