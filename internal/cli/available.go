package cli

// plan with neither --to nor --state: the upgrades available to the node,
// as `kubeadm upgrade plan` lists them (cmd/kubeadm/app/cmd/upgrade/plan.go):
// the newest patch of the node's minor and the newest of the next minor
// the version table knows, each component's current and target version,
// and the command that makes the upgrade.

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// availableReport is plan's JSON output without --to
// (docs/schemas/available.json).
type availableReport struct {
	NodeName          string             `json:"nodeName"`
	KubernetesVersion string             `json:"kubernetesVersion"`
	Upgrades          []availableUpgrade `json:"upgrades"`
}

// availableUpgrade is one version the node can be upgraded to.
type availableUpgrade struct {
	// Description is kubeadm's: "the latest version in the v1.36 series".
	Description string `json:"description"`
	Version     string `json:"version"`
	// Command is the command that makes the upgrade.
	Command    string               `json:"command"`
	Components []availableComponent `json:"components"`
	// RefusedBy are the pre-flight checks on versions that would refuse
	// the upgrade now (etcd's health is checked by plan --to and run).
	RefusedBy []checkJSON `json:"refusedBy"`
	// Problem says why the node cannot be upgraded to the version by
	// version (a pinned image without a version tag); nil when it can.
	Problem *string `json:"problem"`
}

// availableComponent is one component's move.
type availableComponent struct {
	Component string `json:"component"`
	Current   string `json:"current"`
	Target    string `json:"target"`
	// Image is the image it runs after the upgrade.
	Image string `json:"image"`
}

func (g *globals) runAvailable() error {
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
	rep, err := g.available(st)
	if err != nil {
		return err
	}
	if g.json() {
		return g.write(rep)
	}
	g.printAvailable(rep)
	return nil
}

// available is the upgrades the version table offers st: the newest patch
// of its minor when it is newer than the node, and the newest of the next
// minor.
func (g *globals) available(st *nodestate.NodeState) (availableReport, error) {
	rep := availableReport{NodeName: st.NodeName, KubernetesVersion: st.KubernetesVersion, Upgrades: []availableUpgrade{}}
	from := resolve.Resolve(st)
	cur := from.Kubernetes
	if from.KubernetesErr != nil {
		return rep, from.KubernetesErr
	}
	type target struct{ version, description string }
	var targets []target
	if m, ok := resolve.LookupMinor(cur); ok && version.MustParseSemantic(m.Newest()).GreaterThan(cur) {
		targets = append(targets, target{m.Newest(), "the latest version in the v" + m.Minor + " series"})
	}
	if m, ok := resolve.NextMinor(cur); ok {
		targets = append(targets, target{m.Newest(), "the latest version of the next minor, v" + m.Minor})
	}
	for _, t := range targets {
		up := availableUpgrade{Description: t.description, Version: t.version, Command: g.cmdline("run --to " + t.version),
			Components: []availableComponent{}, RefusedBy: []checkJSON{}}
		var target *resolve.Node
		to, err := upgradedState(st, t.version)
		if err != nil {
			msg := err.Error()
			up.Problem = &msg
		} else {
			target = resolve.Resolve(to)
			up.RefusedBy = checksJSON(versions.UpgradePath(from, target))
		}
		for _, c := range st.Roster() {
			if c == nodestate.KubeVIP {
				continue // not versioned with Kubernetes; its image stays
			}
			ac := availableComponent{Component: c, Current: componentVersion(from, c), Target: "unknown", Image: "unknown"}
			if target != nil {
				ac.Target, ac.Image = componentVersion(target, c), target.Image(c)
			}
			up.Components = append(up.Components, ac)
		}
		rep.Upgrades = append(rep.Upgrades, up)
	}
	return rep, nil
}

// upgradedState is st upgraded to Kubernetes version v by version.
func upgradedState(st *nodestate.NodeState, v string) (*nodestate.NodeState, error) {
	rel, err := engine.ReleaseForVersion(st, v)
	if err != nil {
		return nil, err
	}
	to, err := rel.Apply(st)
	if err != nil {
		return nil, fmt.Errorf("upgrade to %s: %w", v, err)
	}
	return to, nil
}

// componentVersion is c's version on n as kubeadm prints it (v1.36.3;
// etcd 3.6.8), "unknown" when it cannot be told.
func componentVersion(n *resolve.Node, c string) string {
	v, err := n.Version(c)
	switch {
	case err != nil || v == nil:
		return "unknown"
	case c == nodestate.Etcd:
		return v.String()
	}
	return "v" + v.String()
}

func (g *globals) printAvailable(rep availableReport) {
	w := g.stdout
	if len(rep.Upgrades) == 0 {
		fmt.Fprintf(w, "node %s runs %s: the version table (docs/versions.md) knows no newer patch of its minor and no next minor; no upgrade is available\n", rep.NodeName, rep.KubernetesVersion)
		return
	}
	for i, up := range rep.Upgrades {
		if i > 0 {
			fmt.Fprintln(w, "\n"+strings.Repeat("_", 72)+"\n")
		}
		fmt.Fprintf(w, "Upgrade to %s:\n\n", up.Description)
		tw := tabwriter.NewWriter(w, 10, 4, 3, ' ', 0)
		fmt.Fprintln(tw, "COMPONENT\tNODE\tCURRENT\tTARGET")
		for _, c := range up.Components {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Component, rep.NodeName, c.Current, c.Target)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
		if up.Problem != nil {
			fmt.Fprintf(w, "This node cannot be upgraded to %s by version: %s\n", up.Version, *up.Problem)
			continue
		}
		if len(up.RefusedBy) > 0 {
			fmt.Fprintln(w, "The pre-flight checks would refuse this upgrade now:")
			for _, f := range up.RefusedBy {
				fmt.Fprintf(w, "\t[%s] %s\n", f.Check, f.Message)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "To see each manifest's diff: `%s`. You can apply the upgrade by executing:\n\n\t%s\n", g.cmdline("plan --to "+up.Version), up.Command)
	}
}
