package cli

// Shell completion: what each argument and flag value can be, and the
// completion command itself (cobra's, with unknown shells refused).

import (
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/manifest"
)

// completionShells are the shells cobra's completion command writes for.
var completionShells = []string{"bash", "zsh", "fish", "powershell"}

// completions wires completion into root: component names for the verbs
// that take them, --output's formats, transaction ids for history TXN,
// and an error (exit 2) for a shell the completion command does not know,
// where cobra would print its help and exit 0.
func (g *globals) completions(root *cobra.Command) {
	for _, name := range []string{"restart", "stop", "start"} {
		find(root, name).ValidArgsFunction = completeComponents
	}
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	find(root, "history").ValidArgsFunction = g.completeTxnIDs

	root.InitDefaultCompletionCmd()
	comp := find(root, "completion")
	comp.Args = cobra.ArbitraryArgs
	comp.RunE = ran(func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return cmdLineErrorf("completion: unknown shell %q: completion scripts are written for %s", args[0], strings.Join(completionShells, ", "))
	})
}

// completeComponents offers the component names not named already.
func completeComponents(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, n := range manifest.Names {
		if !slices.Contains(args, n) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeTxnIDs offers the journal's transaction ids, newest first, each
// with its kind and phase as the description. It reads the journal
// read-only and gives up at once when another command holds it.
func (g *globals) completeTxnIDs(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 || g.setup(cmd) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	g.lockTimeout = min(g.lockTimeout, 500*time.Millisecond)
	j, err := g.openJournal(true)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer j.Close()
	txns, err := j.History(0)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, t := range txns {
		out = append(out, t.ID+"\t"+string(t.Kind)+", "+string(t.Phase))
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
}
