package cli

// stratum-upgrade state: the node state the journal holds, as the file an
// operator edits for apply.

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newStateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "state",
		Short: "Print the node state the journal holds (YAML, or JSON with -o json): the file to edit for apply",
		Long: `state prints the node state the journal holds: the one every manifest is
rendered from, as the last committed transaction (or init) left it, defaults
filled in. The fields come in the order of the reference
(docs/reference/node-state.md). Edit the output and give it to 'plan --state'
and 'apply --state'; unedited, it plans nothing.

Output: YAML (the default, or -o yaml) with a comment naming the journal, or
with -o json one line of JSON. It opens the journal read-only and writes
nothing.`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			j, err := g.openJournal(true)
			if err != nil {
				return err
			}
			defer j.Close()
			st, err := nodeState(j)
			if err != nil {
				return err
			}
			if g.output == "json" { // yaml is the default's YAML
				b, err := st.JSON()
				if err != nil {
					return err
				}
				_, err = g.stdout.Write(b)
				return err
			}
			b, err := st.YAML()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(g.stdout, "# The node state of %s in journal %s.\n# Edit it, then: %s\n#           and: %s\n%s",
				st.NodeName, g.journalPath(), g.cmdline("plan --state FILE"), g.cmdline("apply --state FILE"), b)
			return err
		}),
	}
}
