package cli

// The cluster's side of a multi-member control plane: status --cluster and
// clear-halt, both through the node's own etcd client certificate.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
)

// errSingleMember: the node's etcd has one member; there is no rollout.
var errSingleMember = errors.New("this node's etcd has a single member: there is no cluster rollout (run, apply and the verbs take no lock)")

// withCoordinator runs f with a coordinator of the journal's node's
// cluster, within 30 s in all.
func (g *globals) withCoordinator(f func(ctx context.Context, c *cluster.Coordinator) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := g.coordinator(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(ctx, c)
}

// coordinator connects to the cluster of the journal's node state. Whether
// there is a rollout at all is decided from the member list it reads, never
// from the node state's initialCluster (the first node of a kubeadm
// cluster keeps one entry there whatever joined since).
func (g *globals) coordinator(ctx context.Context) (*cluster.Coordinator, error) {
	j, err := g.openJournal(true)
	if err != nil {
		return nil, err
	}
	st, err := j.NodeState()
	j.Close()
	if err != nil {
		return nil, err
	}
	known, err := cluster.LoadEndpoints(filepath.Join(g.stateDir, cluster.EndpointsFile))
	if err != nil {
		g.log.Warn("ignoring the known etcd endpoints", "err", err)
	}
	c, err := cluster.Connect(ctx, cluster.Config{Local: etcddata.Endpoint(st), Known: known, Node: st.NodeName, Log: g.log})
	if err != nil {
		return nil, err
	}
	if c.Members().Count == 1 {
		c.Close()
		return nil, errSingleMember
	}
	return c, nil
}

// clusterReport is status --cluster's output.
type clusterReport struct {
	Endpoints []string
	View      *cluster.View
	// Downgrade is etcd's downgrade under way, nil when none is.
	Downgrade *cluster.EtcdDowngrade
}

// clusterJSON is status --cluster --output json (docs/schemas/cluster.json):
// every field always present; holder and halt are null when the lock is
// free and the rollout is not halted. The cluster's own keys leave empty
// fields out; this form does not.
type clusterJSON struct {
	Endpoints []string           `json:"endpoints"`
	Revision  int64              `json:"revision"`
	Holder    *cluster.Holder    `json:"holder"`
	Halt      *haltJSON          `json:"halt"`
	Nodes     []nodeProgressJSON `json:"nodes"`
	// EtcdDowngrade is etcd's downgrade under way (null when none is).
	EtcdDowngrade *cluster.EtcdDowngrade `json:"etcdDowngrade"`
}

type haltJSON struct {
	Node    string    `json:"node"`
	Txn     string    `json:"txn"`
	Outcome string    `json:"outcome"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

type nodeProgressJSON struct {
	Node    string    `json:"node"`
	Txn     string    `json:"txn"`
	Kind    string    `json:"kind"`
	Phase   string    `json:"phase"`
	Open    bool      `json:"open"`
	Outcome string    `json:"outcome"`
	Reason  string    `json:"reason"`
	To      string    `json:"to"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
}

func (rep clusterReport) json() clusterJSON {
	v := rep.View
	out := clusterJSON{Endpoints: rep.Endpoints, Revision: v.Revision, Holder: v.Holder, Nodes: []nodeProgressJSON{}, EtcdDowngrade: rep.Downgrade}
	if out.Endpoints == nil {
		out.Endpoints = []string{}
	}
	if h := v.Halt; h != nil {
		out.Halt = &haltJSON{Node: h.Node, Txn: h.Txn, Outcome: h.Outcome, Reason: h.Reason, At: h.At}
	}
	for _, p := range v.Nodes {
		out.Nodes = append(out.Nodes, nodeProgressJSON{Node: p.Node, Txn: p.Txn, Kind: p.Kind, Phase: p.Phase, Open: p.Open(),
			Outcome: p.Outcome, Reason: p.Reason, To: p.To, Started: p.Started, Updated: p.Updated})
	}
	return out
}

func (g *globals) statusCluster() error {
	return g.withCoordinator(func(ctx context.Context, c *cluster.Coordinator) error {
		v, err := c.View(ctx)
		if err != nil {
			return err
		}
		d, err := c.EtcdDowngrade(ctx)
		if err != nil {
			return err
		}
		rep := clusterReport{Endpoints: c.Endpoints(), View: v, Downgrade: d}
		if g.json() {
			return g.write(rep.json())
		}
		rep.print(g.stdout)
		return nil
	})
}

func (rep clusterReport) print(w io.Writer) {
	v := rep.View
	fmt.Fprintf(w, "etcd: %d endpoints (%s), revision %d\n", len(rep.Endpoints), list(rep.Endpoints), v.Revision)
	if v.Holder != nil {
		fmt.Fprintf(w, "rollout lock: held by %s (%s) since %s\n", v.Holder.Node, v.Holder.Kind, v.Holder.Since.Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "rollout lock: free")
	}
	if h := v.Halt; h != nil {
		fmt.Fprintf(w, "HALTED: transaction %s on %s ended %s at %s: %s\n", h.Txn, h.Node, h.Outcome, h.At.Format(time.RFC3339), orNone(h.Reason))
		fmt.Fprintf(w, "  no node begins a transaction until the halt is cleared: look at %s (stratum-upgrade history there), then run stratum-upgrade clear-halt\n", h.Node)
	}
	if rep.Downgrade != nil {
		rep.printDowngrade(w)
	}
	if len(v.Nodes) == 0 {
		fmt.Fprintln(w, "no node has recorded a transaction")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tTXN\tKIND\tPHASE\tOPEN\tTARGET\tUPDATED")
	for _, p := range v.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Node, p.Txn, p.Kind, p.Phase, yesNo(p.Open()), orDash(p.To), p.Updated.Format(time.RFC3339))
	}
	tw.Flush()
}

// printDowngrade is etcd's downgrade under way: its target, each member's
// etcd and storage version, and what is left to do.
func (rep clusterReport) printDowngrade(w io.Writer) {
	d := rep.Downgrade
	fmt.Fprintf(w, "ETCD DOWNGRADE to %s under way: etcd ends it once every member runs %s\n", d.Target, d.Target)
	if by := rep.View.EnabledBy(d.Target); by != nil {
		fmt.Fprintf(w, "  enabled by %s, transaction %s (%s, %s)\n", by.Node, by.Txn, by.Kind, by.Phase)
	} else {
		fmt.Fprintln(w, "  enabled by no stratum-upgrade transaction on record (etcdctl downgrade enable?)")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MEMBER\tETCD\tSTORAGE")
	for _, m := range d.Members {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", m.Name, orDash(m.Version), orDash(m.StorageVersion))
	}
	tw.Flush()
	if behind := d.Behind(); len(behind) > 0 {
		fmt.Fprintf(w, "  still to go back: %s; run stratum-upgrade rollback --last on each of those nodes in turn (the halt lets it through), or etcdctl downgrade cancel to stay where they are\n", list(behind))
	}
}

func orNone(s string) string {
	if s == "" {
		return "no reason recorded"
	}
	return s
}

func newClearHaltCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "clear-halt",
		Short: "Let the nodes of a multi-member cluster begin transactions again after one rolled back",
		Long: `When a transaction on a node of a multi-member etcd cluster ends rolled back
or rollback-failed, the rollout halts: every node refuses to begin another
transaction (run, apply, restart, stop, start, rollback --last) and says which
node halted it and why. Look at that node first (status, history); then
clear-halt removes the halt, through this node's etcd client certificate, and
prints what it cleared. It changes nothing on any node.`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			return g.withCoordinator(func(ctx context.Context, c *cluster.Coordinator) error {
				h, err := c.ClearHalt(ctx)
				if err != nil {
					return err
				}
				if g.json() {
					return g.write(map[string]any{"cleared": h})
				}
				if h == nil {
					fmt.Fprintln(g.stdout, "nothing to do: the rollout is not halted")
					return nil
				}
				fmt.Fprintf(g.stdout, "cleared the halt of transaction %s on %s (%s at %s: %s); nodes may begin transactions again\n", h.Txn, h.Node, h.Outcome, h.At.Format(time.RFC3339), orNone(h.Reason))
				return nil
			})
		}),
	}
}
