package cli

// forget-node NODE: close the open transaction of a node of a multi-member
// cluster that died for good, so that the rollout goes on without it
// (cluster.Forget; docs/ha.md, "A node that died for good").

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/cluster"
)

func newForgetNodeCmd(g *globals) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "forget-node NODE --reason TEXT",
		Short: "Close the open transaction of a node that died for good, so the rollout goes on",
		Long: `A node of a multi-member etcd cluster whose transaction is open owns the
rollout: every other node waits for its resume to end it. When that node will
never run again (its disk or machine is gone), forget-node closes its
transaction in the cluster's keys, as forgotten, with this node's name and
--reason (required), so the other nodes go on. It changes nothing on any
node: the dead node's journal and manifests stay as it left them.

Refused (nothing changed) while NODE's lease holds the rollout lock (its
stratum-upgrade runs: it is not dead), for this node itself, and for a node
the cluster has no record of. A node with no open transaction is nothing to
do. Before the next etcd step, remove the dead node's etcd member or replace
the node: the quorum gate refuses while a member is down (docs/ha.md).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return cmdLineErrorf("forget-node takes one NODE, the name of the node to forget (got %q); `%s` lists the nodes", args, g.cmdline("status --cluster"))
			}
			return nil
		},
		ValidArgsFunction: g.completeOpenNodes,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return cmdLineErrorf("forget-node: --reason TEXT is required: why %s is forgotten, recorded in the cluster with its closed transaction", args[0])
			}
			return g.withCoordinator(func(ctx context.Context, c *cluster.Coordinator) error {
				return g.forgetNode(ctx, c, args[0], reason)
			})
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the node is forgotten (required); recorded with its closed transaction")
	return cmd
}

// forgetNode forgets node through c and reports it.
func (g *globals) forgetNode(ctx context.Context, c *cluster.Coordinator, node, reason string) error {
	res, err := c.Forget(ctx, node, reason)
	switch {
	case errors.Is(err, cluster.ErrNodeAlive):
		// The node owns the rollout and is running: busy, as a node
		// that waits for it is.
		return &codeError{code: ExitBusy, err: err}
	case errors.Is(err, cluster.ErrUnknownNode), errors.Is(err, cluster.ErrForgetSelf):
		return usage(err)
	case err != nil:
		return err
	}
	if g.json() {
		return g.write(forgetOut(node, res))
	}
	g.printForget(node, res)
	return nil
}

func (g *globals) printForget(node string, res *cluster.ForgetResult) {
	b := res.Before
	if res.After == nil {
		fmt.Fprintf(g.stdout, "nothing to do: node %s has no open transaction (its last, %s (%s), ended %s at %s)\n",
			node, b.Txn, b.Kind, orDash(b.Outcome), b.Updated.UTC().Format(time.RFC3339))
	} else {
		f := res.After.Forgotten
		fmt.Fprintf(g.stdout, "forgot node %s: its transaction %s (%s, last in phase %s, started %s) is closed as forgotten by %s at %s: %s (etcd revision %d)\n",
			node, b.Txn, b.Kind, f.Phase, b.Started.UTC().Format(time.RFC3339), f.By, f.At.Format(time.RFC3339), f.Reason, res.Revision)
		fmt.Fprintf(g.stdout, "  %s's journal and manifests are as it left them; should it ever run again, its resume waits its turn like a new transaction\n", node)
		fmt.Fprintf(g.stdout, "  before the next etcd step, remove %s's etcd member (etcdctl member remove ID) or replace the node: the quorum gate refuses while a member is down\n", node)
	}
	if h := res.Halt; h != nil {
		fmt.Fprintf(g.stdout, "the rollout is still HALTED: transaction %s on %s ended %s at %s: %s; look at %s, then run `%s`\n",
			h.Txn, h.Node, h.Outcome, h.At.UTC().Format(time.RFC3339), orNone(h.Reason), h.Node, g.cmdline("clear-halt"))
	} else if res.After != nil {
		fmt.Fprintf(g.stdout, "the rollout goes on: a node waiting for %s begins now (`%s` shows it)\n", node, g.cmdline("status --cluster"))
	}
}

// forgetAdvice is what to do about a refused forget-node, and about a node
// that waits for (or gave up on) another node's open transaction: the
// error says to resume it there; should it never run again, forget-node.
func (g *globals) forgetAdvice(err error) string {
	var alive *cluster.AliveError
	var busy *cluster.BusyError
	switch {
	case errors.As(err, &busy):
		return fmt.Sprintf("; if %s will never run again (its disk or machine is gone), `%s` lets the rollout go on without it (docs/ha.md, \"A node that died for good\")",
			busy.Progress.Node, g.cmdline("forget-node "+shellQuote(busy.Progress.Node)+" --reason TEXT"))
	case errors.As(err, &alive):
		return fmt.Sprintf(". %s is not dead: `stratum-upgrade status` there shows what it does, and its resume ends its transaction (a node cut off: restore its link, docs/ha.md). Forget only a node that will never run stratum-upgrade again, once its lease has run out", alive.Node)
	case errors.Is(err, cluster.ErrNodeAlive):
		return ". It is not dead: let its resume end its transaction"
	case errors.Is(err, cluster.ErrUnknownNode):
		return fmt.Sprintf("; `%s` shows every node's last transaction", g.cmdline("status --cluster"))
	case errors.Is(err, cluster.ErrForgetSelf):
		return fmt.Sprintf("; run `%s` to finish it or `%s` to undo it", g.cmdline("resume"), g.cmdline("rollback"))
	}
	return ""
}

// forgetJSON is forget-node --output json (docs/schemas/forget-node.json).
type forgetJSON struct {
	Node string `json:"node"`
	// Forgotten is false when the node had no open transaction.
	Forgotten bool       `json:"forgotten"`
	By        *string    `json:"by"`
	Reason    *string    `json:"reason"`
	At        *time.Time `json:"at"`
	Revision  int64      `json:"revision"`
	// Before is the node's progress as read; After as written (null
	// when nothing was to do).
	Before nodeProgressJSON  `json:"before"`
	After  *nodeProgressJSON `json:"after"`
	Halt   *haltJSON         `json:"halt"`
}

func forgetOut(node string, res *cluster.ForgetResult) forgetJSON {
	out := forgetJSON{Node: node, Revision: res.Revision, Before: nodeProgressOut(res.Before)}
	if a := res.After; a != nil {
		after := nodeProgressOut(*a)
		out.Forgotten, out.After = true, &after
		if f := a.Forgotten; f != nil {
			at := f.At
			out.By, out.Reason, out.At = optional(f.By), optional(f.Reason), &at
		}
	}
	if h := res.Halt; h != nil {
		out.Halt = &haltJSON{Node: h.Node, Txn: h.Txn, Outcome: h.Outcome, Reason: h.Reason, At: h.At}
	}
	return out
}

// nodeProgressOut is one node's progress as status --cluster's JSON has it.
func nodeProgressOut(p cluster.Progress) nodeProgressJSON {
	return nodeProgressJSON{Node: p.Node, Txn: p.Txn, Kind: p.Kind, Phase: p.Phase, Open: p.Open(),
		Outcome: p.Outcome, Reason: p.Reason, To: p.To, Started: p.Started, Updated: p.Updated}
}

// completeOpenNodes completes NODE with the nodes whose transaction is
// open, this one aside: the ones forget-node can act on. Bounded at 3 s;
// no etcd, no suggestion.
func (g *globals) completeOpenNodes(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 || g.setup(cmd) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	g.lockTimeout = min(g.lockTimeout, time.Second) // a running transaction holds the journal
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := g.coordinator(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer c.Close()
	v, err := c.View(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	self := ""
	if j, err := g.openJournal(true); err == nil {
		if st, err := j.NodeState(); err == nil {
			self = st.NodeName
		}
		j.Close()
	}
	var names []string
	for _, p := range v.Nodes {
		if p.Open() && p.Node != self && !slices.Contains(names, p.Node) {
			names = append(names, p.Node)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
