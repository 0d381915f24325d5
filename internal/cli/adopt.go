package cli

// init --from-kubeadm: adopt a node kubeadm made. The node state is
// derived from the manifests kubelet runs (package adopt), shown with what
// rendering it does to each component, and imported only with --yes; a
// render that would restart a component needs --allow-restart as well.

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ciq/stratum-upgrade/adopt"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// adoptFlags are init's --from-kubeadm flags.
type adoptFlags struct {
	fromKubeadm, yes, allowRestart bool
	configFile                     string
}

// check refuses the combinations init cannot do: --from-kubeadm with
// --state, --dry-run or --all-at-once (without --yes it is its own dry
// run; its writes are never all at once), and the adoption flags without
// --from-kubeadm.
func (a adoptFlags) check(stateFile string, dryRun, allAtOnce bool) error {
	if !a.fromKubeadm {
		switch {
		case a.yes:
			return cmdLineErrorf("init: --yes is for --from-kubeadm (init --state FILE needs no confirmation)")
		case a.allowRestart:
			return cmdLineErrorf("init: --allow-restart is for --from-kubeadm --yes")
		case a.configFile != "":
			return cmdLineErrorf("init: --kubeadm-config is for --from-kubeadm")
		}
		return nil
	}
	switch {
	case stateFile != "":
		return cmdLineErrorf("init: --from-kubeadm and --state are exclusive: --from-kubeadm derives the node state from kubeadm's manifests")
	case dryRun:
		return cmdLineErrorf("init: --from-kubeadm writes nothing without --yes: run it without --dry-run to see what it would do")
	case allAtOnce:
		return cmdLineErrorf("init: --from-kubeadm does not take --all-at-once: what restarts nothing is written at once anyway, and what restarts goes one component at a time")
	case a.allowRestart && !a.yes:
		return cmdLineErrorf("init: --allow-restart goes with --yes")
	}
	return nil
}

// ErrAdoptRestarts is returned by init --from-kubeadm --yes when the render
// of the derived state would restart a component and --allow-restart was
// not given.
var ErrAdoptRestarts = errors.New("adopting this node would restart components")

// adoptKubeadm is init --from-kubeadm.
func (g *globals) adoptKubeadm(a adoptFlags, force bool, opts engine.UpgradeOptions) error {
	src, err := adopt.ReadKubeadm(g.manifestDir, a.configFile)
	if err != nil {
		return fmt.Errorf("init --from-kubeadm: %w", err)
	}
	plan, err := adopt.Check(src)
	if err != nil {
		return fmt.Errorf("init --from-kubeadm: %w", err)
	}
	restarts := plan.Restarts()
	if g.json() && !a.yes {
		return g.write(adoptJSON(plan, src.Dir))
	}
	if !g.json() {
		if err := printAdoption(g.stdout, plan, src.Dir); err != nil {
			return err
		}
	}
	switch {
	case !a.yes:
		if !g.json() {
			fmt.Fprintf(g.stdout, "\nnothing written. To adopt the node: `%s`\n", g.cmdline(adoptCmdline(a, len(restarts) > 0)))
		}
		return nil
	case len(restarts) > 0 && !a.allowRestart:
		return fmt.Errorf("init --from-kubeadm: %w (%s; see why above); nothing written. `%s` adopts it anyway, replacing them one at a time with the waits",
			ErrAdoptRestarts, strings.Join(restarts, ", "), g.cmdline(adoptCmdline(a, true)))
	}
	return g.importState(plan.State, "", force, false, opts)
}

// adoptCmdline is the command that adopts with a's configuration file.
func adoptCmdline(a adoptFlags, allowRestart bool) string {
	s := "init --from-kubeadm"
	if a.configFile != "" {
		s += " --kubeadm-config " + shellQuote(a.configFile)
	}
	s += " --yes"
	if allowRestart {
		s += " --allow-restart"
	}
	return s
}

// printAdoption prints the derived state and each component's verdict.
func printAdoption(w io.Writer, plan *adopt.Plan, dir string) error {
	st := plan.State
	fmt.Fprintf(w, "kubeadm node %s (%s), manifests in %s\n", st.NodeName, st.KubernetesVersion, dir)
	for _, n := range plan.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	b, err := st.Marshal()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nderived node state:\n%s\n", indent(string(b), "  "))
	for _, v := range plan.Components {
		if !v.Restarts {
			fmt.Fprintf(w, "%-24s kept running: kubelet sees the same pod in the render\n", v.Name)
			continue
		}
		fmt.Fprintf(w, "%-24s WOULD RESTART: kubelet sees another pod in the render:\n", v.Name)
		for _, why := range v.Why {
			fmt.Fprintf(w, "    %s\n", why)
		}
	}
	return nil
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix)
}

// adoptReport is init --from-kubeadm's JSON output without --yes
// (docs/schemas/adopt.json).
type adoptReport struct {
	ManifestDir string                `json:"manifestDir"`
	State       *nodestate.NodeState  `json:"state"`
	Components  []adoptComponentEntry `json:"components"`
	Notes       []string              `json:"notes"`
	Restarts    []string              `json:"restarts"`
}

type adoptComponentEntry struct {
	Name     string   `json:"name"`
	File     string   `json:"file"`
	Restarts bool     `json:"restarts"`
	Why      []string `json:"why"`
}

func adoptJSON(plan *adopt.Plan, dir string) adoptReport {
	r := adoptReport{ManifestDir: dir, State: plan.State, Notes: nonNil(plan.Notes), Restarts: nonNil(plan.Restarts())}
	for _, v := range plan.Components {
		r.Components = append(r.Components, adoptComponentEntry{Name: v.Name, File: v.File, Restarts: v.Restarts, Why: nonNil(v.Why)})
	}
	return r
}
