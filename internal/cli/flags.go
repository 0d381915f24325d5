package cli

// The flags: which exist, which commands take them (newRoot, conventions)
// and their validation (setup).

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/proc"
)

// globalFlags are the flags every command takes; txnFlags only the
// commands that drive a transaction (run, resume, rollback).
var (
	globalFlags = []string{"manifest-dir", "state-dir", "lock-timeout", "log-level", "output", "proc-scope"}
	txnFlags    = []string{"replace-timeout", "active-timeout", "stop-timeout", "release-wait", "soak", "etcd-backup-timeout", "keep", "metrics-file", "cluster-wait", "etcd-members", "kubeconfig", "no-events", "no-kubeadm-config", "no-surge"}
)

// defineFlags binds every global and transaction flag to g, in one set
// that newRoot hands out to the commands that take each.
func (g *globals) defineFlags() *pflag.FlagSet {
	f := pflag.NewFlagSet("stratum-upgrade", pflag.ContinueOnError)
	f.StringVar(&g.manifestDir, "manifest-dir", manifest.DefaultDir, "the static pod manifest directory (kubelet's staticPodPath); init records it in the journal")
	f.StringVar(&g.stateDir, "state-dir", DefaultStateDir, "state directory: the journal ("+JournalFile+"), snapshots ("+SnapshotsDir+"/), "+ProgressFile)
	f.DurationVar(&g.dl.Replace, "replace-timeout", engine.DefaultDeadlines.Replace, "how long to wait for kubelet to replace a component's process after its manifest is written")
	f.DurationVar(&g.dl.Active, "active-timeout", engine.DefaultDeadlines.Active, "how long to wait for a new process to answer its health endpoint")
	f.DurationVar(&g.dl.Stop, "stop-timeout", engine.DefaultDeadlines.Stop, "how long to wait for a component to exit after its manifest is removed")
	f.DurationVar(&g.dl.Release, "release-wait", engine.DefaultDeadlines.Release, "where kubelet's pod cgroups cannot be seen: how long a stopped component stays stopped, for kubelet to release its pod's name, before its new manifest is written")
	f.DurationVar(&g.dl.Soak, "soak", engine.DefaultDeadlines.Soak, "how long every component must stay active, and none be replaced again, before a commit (health is checked every 200ms)")
	f.DurationVar(&g.dl.EtcdBackup, "etcd-backup-timeout", engine.DefaultDeadlines.EtcdBackup, "how long the etcd data snapshot before an etcd image change may take")
	f.DurationVar(&g.coord.Wait, "cluster-wait", 30*time.Minute, "on a node of a multi-member etcd cluster: how long to wait while another node holds the rollout lock")
	f.IntVar(&g.coord.Members, "etcd-members", 0, "only when etcd's member list cannot be read: how many members its cluster has, as you know it; kept in the state directory's "+cluster.MembersFile+" as stated by you (etcd's own list always wins)")
	f.IntVar(&g.keep, "keep", 5, "how many snapshots retention keeps (an open transaction's is always kept)")
	f.DurationVar(&g.lockTimeout, "lock-timeout", journal.DefaultLockTimeout, "how long to wait for another stratum-upgrade to release the journal")
	f.StringVar(&g.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	f.StringVarP(&g.output, "output", "o", "text", "output format: text, json (one JSON object per line) or yaml (one YAML document per object)")
	f.StringVar(&g.metricsFile, "metrics-file", "", "after the transaction, write Prometheus text-format metrics here (node_exporter textfile collector: <dir>/stratum-upgrade.prom)")
	f.StringVar(&g.api.kubeconfig, "kubeconfig", "", "the cluster's API server, for the Events on the Node, the kubeadm-config update and the APIServerSkew and StaticPodKubelet pre-flights (default: admin.conf in the node state's kubeconfigDir)")
	f.BoolVar(&g.api.noEvents, "no-events", false, "post no Events on the Node and leave its annotations alone")
	f.BoolVar(&g.api.noKubeadmConfig, "no-kubeadm-config", false, "after a commit, leave the kubeadm-config ConfigMap's ClusterConfiguration as it is")
	f.BoolVar(&g.noSurge, "no-surge", false, "replace kube-apiserver, kube-controller-manager and kube-scheduler stop-then-start: start no new instance beside the running one")
	f.StringVar(&g.procScope, "proc-scope", "", "only see component processes descending from this pid (\"self\": none); for test harnesses")
	_ = f.MarkHidden("proc-scope")
	return f
}

// setup applies the environment and the config file to the flags of cmd
// the command line left unset, validates the flags cmd uses and builds the
// logger and the scanner. version and completion read no config: they
// need nothing from it, and a broken file must not break them.
func (g *globals) setup(cmd *cobra.Command) error {
	uses := func(name string) bool { return usesFlag(cmd, name) }
	if readsConfig(cmd) {
		if err := g.applyConfig(os.LookupEnv, uses, bootStep(cmd)); err != nil {
			return err
		}
	}
	if !slices.Contains(outputFormats, g.output) {
		return cmdLineErrorf("--output %q: must be text, json or yaml%s", g.output, g.from("output"))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return cmdLineErrorf("--log-level %q: must be debug, info, warn or error%s", g.logLevel, g.from("log-level"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--replace-timeout", g.dl.Replace}, {"--active-timeout", g.dl.Active}, {"--stop-timeout", g.dl.Stop},
		{"--release-wait", g.dl.Release}, {"--soak", g.dl.Soak}, {"--etcd-backup-timeout", g.dl.EtcdBackup}, {"--lock-timeout", g.lockTimeout},
		{"--cluster-wait", g.coord.Wait},
	} {
		if d.v <= 0 && uses(d.name) {
			return cmdLineErrorf("%s %s: must be positive%s", d.name, d.v, g.from(d.name))
		}
	}
	if f := cmd.Flags().Lookup("etcd-members"); f != nil && f.Changed && g.coord.Members < 1 {
		return cmdLineErrorf("--etcd-members %d: must be at least 1 (the member count of this node's etcd cluster)", g.coord.Members)
	}
	if g.keep < 1 && uses("keep") {
		return cmdLineErrorf("--keep %d: must be at least 1%s", g.keep, g.from("keep"))
	}
	if g.manifestDir == "" || g.stateDir == "" {
		return cmdLineErrorf("--manifest-dir and --state-dir must not be empty")
	}
	for _, p := range []*string{&g.manifestDir, &g.stateDir} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return usagef("%s: %w", *p, err)
		}
		*p = abs
	}
	opts := &slog.HandlerOptions{Level: level}
	if g.json() {
		g.log = slog.New(slog.NewJSONHandler(g.stderr, opts))
	} else {
		g.log = slog.New(slog.NewTextHandler(g.stderr, opts))
	}
	// The packages below log through slog.Default in places (migrations).
	slog.SetDefault(g.log)
	g.scanner = proc.Host().WithBootID(fault.BootID()) // "" (the kernel's) but in a stratumfault build
	switch g.procScope {
	case "":
	case "self":
		g.scanner = g.scanner.Within(os.Getpid())
	default:
		pid, err := strconv.Atoi(g.procScope)
		if err != nil || pid < 1 {
			return cmdLineErrorf("--proc-scope %q: must be a pid or \"self\"", g.procScope)
		}
		g.scanner = g.scanner.Within(pid)
	}
	return nil
}

// readsConfig: every command reads the config file and the environment
// but version, help and completion (the completion script and cobra's
// __complete), which use none of their keys.
func readsConfig(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		switch n := c.Name(); {
		case n == "version", n == "help", n == "completion", strings.HasPrefix(n, "__complete"):
			return false
		}
	}
	return true
}

// bootStep is resume --prepare, the boot unit that runs before kubelet.
func bootStep(cmd *cobra.Command) bool {
	f := cmd.Flags().Lookup("prepare")
	return cmd.Name() == "resume" && f != nil && f.Changed
}

// usesFlag reports whether cmd uses the flag name ("--soak" or "soak"):
// it takes the flag, and it is not one of the transaction flags resume
// --prepare takes but never reads (it waits for nothing). A flag a
// command does not use is neither set from the environment or the config
// file nor validated, so a bad value there cannot break that command.
func usesFlag(cmd *cobra.Command, name string) bool {
	name = strings.TrimPrefix(name, "--")
	if cmd.Flags().Lookup(name) == nil {
		return false
	}
	return !bootStep(cmd) || !slices.Contains(txnFlags, name)
}
