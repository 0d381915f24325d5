package cli

// kubeadm habits: what an operator used to kubeadm types by reflex, and
// what to type here instead (docs/for-kubeadm-users.md). A version without
// its v is taken as kubeadm takes it; every other habit is refused as bad
// usage that names the command to type.

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// kubeadmDoc is the page that maps kubeadm's upgrade commands and flags.
const kubeadmDoc = "docs/for-kubeadm-users.md"

// acceptBareVersion makes --to 1.35.4 mean v1.35.4, as kubeadm upgrade
// apply takes either, unless a file of that name exists (a release file is
// read as such).
func acceptBareVersion(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("to")
	if f == nil || !f.Changed {
		return nil
	}
	v := f.Value.String()
	if v == "" || strings.HasPrefix(v, "v") {
		return nil
	}
	if _, err := os.Stat(v); err == nil {
		return nil
	}
	if _, err := nodestate.ParseKubernetesVersion("v" + v); err != nil {
		return nil
	}
	return f.Value.Set("v" + v)
}

// habitHint is what to type here for args, a command line cobra refused
// with err, where it is a kubeadm (or klog) habit; "" otherwise.
func (g *globals) habitHint(args []string, err error) string {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, `unknown command "upgrade"`):
		return g.upgradeHint(args)
	case strings.HasPrefix(msg, "unknown flag: --v"), strings.HasPrefix(msg, "unknown shorthand flag: 'v'"):
		return "--v=N (-v) is klog's verbosity, as kubeadm takes it: here it is `--log-level debug` (debug, info, warn or error)"
	}
	return ""
}

// upgradeHint maps `kubeadm upgrade SUB [VERSION]`, typed here, to the
// command that does it.
func (g *globals) upgradeHint(args []string) string {
	var rest []string
	for i, a := range args {
		if a == "upgrade" {
			rest = args[i+1:]
			break
		}
	}
	sub, version := "", "VERSION"
	if len(rest) > 0 {
		sub = rest[0]
	}
	if len(rest) > 1 && !strings.HasPrefix(rest[1], "-") {
		version = rest[1]
		if !strings.HasPrefix(version, "v") {
			version = "v" + version
		}
	}
	var do string
	switch sub {
	case "plan":
		do = fmt.Sprintf("`%s` lists the upgrades available, `%s` shows one", g.cmdline("plan"), g.cmdline("plan --to "+version))
	case "apply":
		do = fmt.Sprintf("`%s` upgrades this node (`%s` first shows what it changes)", g.cmdline("run --to "+version), g.cmdline("plan --to "+version))
	case "node":
		do = fmt.Sprintf("every control-plane node upgrades the same way: `%s` on each, one at a time", g.cmdline("run --to VERSION"))
	case "diff":
		do = fmt.Sprintf("`%s` shows the diff of each manifest", g.cmdline("plan --to "+version))
	default:
		do = fmt.Sprintf("kubeadm's `upgrade plan` is `%s`, `upgrade apply VERSION` is `%s`", g.cmdline("plan"), g.cmdline("run --to VERSION"))
	}
	return fmt.Sprintf("stratum-upgrade has no upgrade command (kubeadm has): %s; %s maps each kubeadm upgrade command and flag", do, kubeadmDoc)
}

// versionArgHint is apply's message for a positional argument that is a
// version, not a node state file: the command that upgrades to it.
func (g *globals) versionArgHint(cmd *cobra.Command, arg string) error {
	if cmd.Name() != "apply" || !looksLikeVersion.MatchString(arg) {
		return nil
	}
	if _, err := os.Stat(arg); err == nil {
		return nil
	}
	v := arg
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return cmdLineErrorf("apply: unexpected argument %q: apply changes the node state (--state FILE); to upgrade to Kubernetes %s (kubeadm upgrade apply %s), run `%s`", arg, v, arg, g.cmdline("run --to "+v))
}
