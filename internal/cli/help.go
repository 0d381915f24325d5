package cli

// The command-line conventions every command follows, applied once from
// newRoot: which flags each command takes, the groups of the root help,
// an Examples section and the exit codes of each command, arguments and
// required flags, and what a command says when the state directory holds
// no journal.

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/manifest"
)

// groups are the root help's command groups, in workflow order.
var groups = []*cobra.Group{
	{ID: "setup", Title: "Set up:"},
	{ID: "upgrade", Title: "Upgrade:"},
	{ID: "inspect", Title: "Inspect:"},
	{ID: "other", Title: "Other:"},
}

// commandConventions is what conventions applies to one command.
type commandConventions struct {
	group string
	// txn: the command drives a transaction and takes the txnFlags.
	txn bool
	// exits are the exit codes the command can return.
	exits []int
	// required is the flag the command cannot run without and its
	// placeholder; argFlag the flag a positional argument belongs to where
	// no flag is required. or is a flag that may be given instead of
	// required. what names the flag's value in those messages ("release
	// file (YAML, kind Release)"); the flag's usage when empty.
	required, argFlag, placeholder, or, what string
	// noArgs: the command takes no positional argument.
	noArgs  bool
	example string
}

// toValue names --to's value in plan's and run's messages about it.
const toValue = "Kubernetes version (v1.36.3) or the release file (YAML, kind Release) to upgrade to"

var conventionsOf = map[string]commandConventions{
	"init": {group: "setup", txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, required: "state", placeholder: "FILE", or: "from-kubeadm", example: `  # Import the node state and render every manifest (once per node).
  stratum-upgrade init --state /etc/stratum/node.yaml
  # Adopt a node kubeadm made: show what would be derived, then adopt it.
  stratum-upgrade init --from-kubeadm --kubeadm-config /root/kubeadm-config.yaml
  stratum-upgrade init --from-kubeadm --kubeadm-config /root/kubeadm-config.yaml --yes
  # Replace the node state, or move the node to kubelet's new staticPodPath.
  stratum-upgrade init --force --state /etc/stratum/node.yaml --manifest-dir /srv/manifests`},
	"render": {group: "setup", noArgs: true, txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, example: `  # Put every manifest back as the node state renders it (hand edits are overwritten).
  stratum-upgrade render`},
	"plan": {group: "upgrade", argFlag: "to", placeholder: "VERSION|RELEASE", what: toValue, exits: []int{ExitOK, ExitError, ExitUsage, ExitBusy}, example: `  # Show the upgrades available (as kubeadm upgrade plan), then what one would change.
  stratum-upgrade plan
  stratum-upgrade plan --to v1.36.3
  # The same for a release file, which pins the images it names; nothing is written.
  stratum-upgrade plan --to release-v1.34.5.yaml
  stratum-upgrade plan --to release-v1.34.5.yaml --ignore-preflight-errors=EtcdHealth
  # Show what a new node state would change (an extra arg, the cis profile).
  stratum-upgrade plan --state /etc/stratum/node.yaml`},
	"run": {group: "upgrade", txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, required: "to", placeholder: "VERSION|RELEASE", what: toValue, example: `  # Upgrade the node to a Kubernetes version (etcd to kubeadm's pairing); any failure rolls it back.
  stratum-upgrade run --to v1.36.3
  # Upgrade to a release file, which pins the images it names.
  stratum-upgrade run --to release-v1.34.5.yaml
  # A longer soak, and metrics for node_exporter's textfile collector.
  stratum-upgrade run --to release-v1.34.5.yaml --soak 2m --metrics-file /var/lib/node_exporter/stratum-upgrade.prom`},
	"finish": {group: "upgrade", txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, example: `  # A minor upgrade in two steps: the new binaries emulating the old minor, then the finishing step.
  stratum-upgrade run --to v1.37.2 --two-step
  stratum-upgrade finish`},
	"apply": {group: "upgrade", txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, required: "state", placeholder: "FILE", example: `  # Change the node state as one transaction (plan --state shows the diff first).
  stratum-upgrade plan --state /etc/stratum/node.yaml
  stratum-upgrade apply --state /etc/stratum/node.yaml`},
	"restart": {group: "upgrade", txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, example: `  # Restart the scheduler, waiting until the new one answers.
  stratum-upgrade restart kube-scheduler
  # After a certificate rotation: restart exactly the components that read the rotated files.
  stratum-upgrade restart --changed`},
	"stop": {group: "upgrade", txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, example: `  # Stop the scheduler until it is started again (render and reboots keep it stopped).
  stratum-upgrade stop kube-scheduler
  stratum-upgrade start kube-scheduler`},
	"start": {group: "upgrade", txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, example: `  # Start every component stop stopped, waiting until each answers.
  stratum-upgrade start --all`},
	"resume": {group: "upgrade", noArgs: true, txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, example: `  # Continue an interrupted transaction (the boot unit runs this after kubelet).
  stratum-upgrade resume
  # The boot step before kubelet: sweep staging leftovers, wait for nothing.
  stratum-upgrade resume --prepare`},
	"rollback": {group: "upgrade", noArgs: true, txn: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitRolledBack, ExitRollbackFailed, ExitBusy, ExitInterrupted}, example: `  # Undo the open transaction.
  stratum-upgrade rollback --reason "apiserver latency regression"
  # Undo the last committed transaction (an upgrade, apply, stop or start).
  stratum-upgrade rollback --last`},
	"status": {group: "inspect", noArgs: true, exits: []int{ExitOK, ExitError, ExitUsage}, example: `  stratum-upgrade status
  stratum-upgrade status -o json
  # The rollout of a multi-member cluster: the lock, a halt, every node.
  stratum-upgrade status --cluster`},
	"clear-halt": {group: "upgrade", noArgs: true, exits: []int{ExitOK, ExitError, ExitUsage}, example: `  # After looking at the node whose rollback halted the rollout.
  stratum-upgrade status --cluster
  stratum-upgrade clear-halt`},
	"forget-node": {group: "upgrade", exits: []int{ExitOK, ExitError, ExitUsage, ExitBusy}, example: `  # cp-3 died for good mid-upgrade and every other node waits for it.
  stratum-upgrade status --cluster
  stratum-upgrade forget-node cp-3 --reason "disk failed; node replaced by cp-4"`},
	"state": {group: "inspect", noArgs: true, exits: []int{ExitOK, ExitError, ExitUsage, ExitBusy}, example: `  # Edit the node state the journal holds, see the change, make it.
  stratum-upgrade state > node.yaml
  stratum-upgrade plan --state node.yaml
  stratum-upgrade apply --state node.yaml`},
	"history": {group: "inspect", exits: []int{ExitOK, ExitError, ExitUsage, ExitBusy}, example: `  stratum-upgrade history --limit 10
  # One transaction with every journaled step.
  stratum-upgrade history 20261202T130405Z-1a2b`},
	"audit": {group: "inspect", exits: []int{ExitOK, ExitError, ExitUsage}, example: `  stratum-upgrade audit
  stratum-upgrade audit kube-apiserver -o json`},
	"images": {group: "upgrade", exits: []int{ExitOK, ExitError, ExitUsage, ExitBusy}, example: `  # The images a node needs for a release, to mirror for an air-gapped site.
  stratum-upgrade images list --to v1.36.3
  stratum-upgrade images list --to release-v1.34.5.yaml
  # Pull them ahead of the upgrade (run pulls what is missing anyway).
  stratum-upgrade images pull --to v1.36.3`},
	"version": {group: "other", noArgs: true, exits: []int{ExitOK, ExitUsage}, example: `  stratum-upgrade version -o json`},
}

// exitName is a code's name in a command's exit-code line.
var exitName = map[int]string{
	ExitOK: "ok", ExitError: "error", ExitUsage: "bad usage", ExitRolledBack: "rolled back",
	ExitRollbackFailed: "rollback failed", ExitBusy: "busy", ExitInterrupted: "interrupted",
}

// exitLine is the exit-code line of a command's help.
func exitLine(codes []int) string {
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d %s", c, exitName[c])
	}
	return "Exit codes: " + strings.Join(parts, ", ") + " (what each means: stratum-upgrade --help)"
}

// conventions applies conventionsOf and the checks below to root's
// commands, and enables cobra's completion command.
func (g *globals) conventions(root *cobra.Command) {
	root.AddGroup(groups...)
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	for _, cmd := range root.Commands() {
		cc, ok := conventionsOf[cmd.Name()]
		if !ok {
			continue
		}
		cmd.GroupID = cc.group
		cmd.Example = cc.example
		long := strings.TrimRight(strings.TrimSuffix(cmd.Long, exitCodesHelp), "\n")
		if long == "" {
			long = cmd.Short
		}
		cmd.Long = long + "\n\n" + exitLine(cc.exits)
		if cc.txn {
			for _, name := range txnFlags {
				cmd.Flags().AddFlag(g.flags.Lookup(name))
			}
		}
		switch {
		case cc.required != "":
			g.requireFlag(cmd, cc)
		case cc.argFlag != "":
			cmd.Args = g.argsOfFlag(cc.argFlag, cc.placeholder, cc.valueName(cmd, cc.argFlag))
		case cc.noArgs:
			cmd.Args = noArgs
		}
	}
	g.checkHistoryLimit(root)
	g.auditComponents(root)
	g.guardNoJournal(root)
	g.completions(root)
}

// find is root's command name; it panics when there is none (a bug in
// newRoot, caught by every test that builds the root).
func find(root *cobra.Command, name string) *cobra.Command {
	for _, c := range root.Commands() {
		if c.Name() == name {
			return c
		}
	}
	panic("no command " + name)
}

// valueName is what the messages about flag call its value: cc.what, else
// the flag's usage.
func (cc commandConventions) valueName(cmd *cobra.Command, flag string) string {
	if cc.what != "" {
		return cc.what
	}
	return cmd.Flags().Lookup(flag).Usage
}

// argsOfFlag makes a positional argument a mistake that names the flag
// (e.g. --to RELEASE) it belongs to and the command to run instead.
func (g *globals) argsOfFlag(flag, placeholder, what string) cobra.PositionalArgs {
	usageText := fmt.Sprintf("--%s %s", flag, placeholder)
	return func(cmd *cobra.Command, args []string) error {
		switch len(args) {
		case 0:
			return nil
		case 1:
			if err := g.versionArgHint(cmd, args[0]); err != nil {
				return err
			}
			return cmdLineErrorf("%s: unexpected argument %q: the %s is given with %s: `%s`", cmd.Name(), args[0], what, usageText, g.cmdline(cmd.Name()+" --"+flag+" "+shellQuote(args[0])))
		}
		return cmdLineErrorf("%s takes no arguments (got %s); the %s is given with %s", cmd.Name(), strings.Join(args, " "), what, usageText)
	}
}

// requireFlag makes cc.required (e.g. --to RELEASE) required, with one
// message for every command ("run: --to RELEASE is required"), and a
// positional argument a mistake that names the flag it belongs to. With
// cc.or set, that flag given instead satisfies the requirement.
func (g *globals) requireFlag(cmd *cobra.Command, cc commandConventions) {
	flag, or := cc.required, cc.or
	usageText := fmt.Sprintf("--%s %s", flag, cc.placeholder)
	what := cc.valueName(cmd, flag)
	cmd.Args = g.argsOfFlag(flag, cc.placeholder, what)
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if v, _ := cmd.Flags().GetString(flag); v != "" {
			return nil
		}
		if or == "" {
			return &ranError{cmdLineErrorf("%s: %s is required: the %s", cmd.Name(), usageText, what)}
		}
		orFlag := cmd.Flags().Lookup(or)
		if v := orFlag.Value.String(); v != "" && v != "false" {
			return nil
		}
		if orFlag.Value.Type() == "bool" {
			// A switch: its usage's first clause says what it does.
			does, _, _ := strings.Cut(orFlag.Usage, ":")
			return &ranError{cmdLineErrorf("%s: %s or --%s is required: the %s, or --%s to %s", cmd.Name(), usageText, or, what, or, does)}
		}
		return &ranError{cmdLineErrorf("%s: %s or --%s FILE is required: the %s, or the %s", cmd.Name(), usageText, or, what, orFlag.Usage)}
	}
}

// noArgs refuses any positional argument, naming the command.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cmdLineErrorf("%s takes no arguments (got %s)", cmd.Name(), strings.Join(args, " "))
	}
	return nil
}

// checkHistoryLimit refuses a negative history --limit.
func (g *globals) checkHistoryLimit(root *cobra.Command) {
	cmd := find(root, "history")
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if n, _ := cmd.Flags().GetInt("limit"); n < 0 {
			return &ranError{cmdLineErrorf("history: --limit %d: must not be negative (0 shows every transaction)", n)}
		}
		return nil
	}
}

// auditComponents makes audit's argument one of the component names,
// listed in its help and offered by completion.
func (g *globals) auditComponents(root *cobra.Command) {
	cmd := find(root, "audit")
	cmd.ValidArgs = manifest.Names
	cmd.Long = strings.Replace(cmd.Long, "\n\nExit codes:", "\n\nCOMPONENT is one of: "+strings.Join(manifest.Names, ", ")+".\n\nExit codes:", 1)
}

// guardNoJournal makes the commands that read an existing journal say so
// when the state directory has none and another one is known (the
// built-in default, STRATUM_STATE_DIR, the config file): resume fails
// (exit 1) instead of answering "nothing to do", status and history warn;
// so they do when the state directory's snapshots show it had a journal.
// resume with no journal anywhere still exits 0, saying where it looked:
// the boot unit runs it on every node, initialised or not.
func (g *globals) guardNoJournal(root *cobra.Command) {
	for _, name := range []string{"resume", "status", "history"} {
		cmd := find(root, name)
		inner := cmd.RunE
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			ok, err := g.journalExists()
			if err != nil || ok {
				return inner(cmd, args)
			}
			nj := g.noJournal().(*noJournalError)
			switch {
			case cmd.Name() != "resume":
				if (len(nj.others) > 0 || nj.lost()) && len(args) == 0 { // history TXN fails with the same words
					fmt.Fprintf(g.stderr, "stratum-upgrade: warning: %s%s\n", nj, g.noJournalAdvice(nj))
				}
				return inner(cmd, args)
			case len(nj.others) > 0 || nj.lost():
				return &ranError{nj}
			}
			return g.nothing(cmd.Name(), "nothing to do: "+nj.Error())
		}
	}
}
