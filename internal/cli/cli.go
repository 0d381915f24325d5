// Package cli is the stratum-upgrade command line: the commands, their
// flags, their output and their exit codes. cmd/stratum-upgrade is a thin
// main around Main, so tests can run the real command in-process or as a
// binary.
//
// Every command that reads or writes the journal opens it first and holds
// it to the end: bbolt's flock on <state-dir>/stratum.db is the one lock
// that keeps a second stratum-upgrade out of the manifest directory.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// Exit codes of stratum-upgrade. They are part of the interface: scripts
// and the systemd units rely on them (docs/cli.md).
const (
	// ExitOK: committed, done, or nothing to do (the node already is where
	// the command would take it).
	ExitOK = 0
	// ExitError: any other failure (I/O, an unusable state directory, a
	// damaged journal, no node state imported yet, a refused precondition,
	// a release a pre-flight check refuses).
	ExitError = 1
	// ExitUsage: bad usage: unknown command or flag, bad flag value, missing
	// --to, a malformed release or node state file, a release naming an
	// unknown component. Fix the command line or the input file.
	ExitUsage = 2
	// ExitRolledBack: the upgrade failed and was rolled back; the node runs
	// what it ran before.
	ExitRolledBack = 3
	// ExitRollbackFailed: the upgrade failed and so did its rollback; the
	// node needs an operator (docs/operations.md).
	ExitRollbackFailed = 4
	// ExitBusy: another stratum-upgrade holds the journal, or a transaction
	// is open and must be resumed or rolled back first.
	ExitBusy = 5
	// ExitInterrupted: SIGINT, SIGTERM or SIGHUP stopped the command mid-transaction;
	// the transaction stays open and `stratum-upgrade resume` continues it.
	ExitInterrupted = 6
)

// Version is the stratum-upgrade version, set at build time with
// -ldflags "-X github.com/ciq/stratum-upgrade/internal/cli.Version=v1.2.3".
var Version = "dev"

// Default paths on a node.
const (
	DefaultStateDir = "/var/lib/stratum"
	// JournalFile and ProgressFile are the names of the journal and of the
	// progress file inside the state directory; SnapshotsDir holds the
	// snapshots.
	JournalFile  = "stratum.db"
	ProgressFile = "progress.json"
	SnapshotsDir = "snapshots"
)

// exitCodes is every exit code with its summary in the --help text, in
// order. docs/cli.md holds the full table; TestDocsExitCodes keeps both
// in step with the constants above. A "\n" in a summary continues it on
// the next line of the help.
var exitCodes = []struct {
	code    int
	summary string
}{
	{ExitOK, "committed, done, or nothing to do"},
	{ExitError, "error (I/O, unusable state directory, damaged journal, no node state yet,\na release a pre-flight check refuses)"},
	{ExitUsage, "bad usage (flags, missing --to, malformed release or node state file,\nunknown component in a release)"},
	{ExitRolledBack, "the upgrade failed and was rolled back: the node runs what it ran before"},
	{ExitRollbackFailed, "the upgrade failed and so did its rollback: the node needs an operator"},
	{ExitBusy, "busy: another stratum-upgrade holds the journal, or a transaction is\nopen (resume or roll it back first); in a multi-member cluster, another\nnode owns the rollout or it is halted (status --cluster)"},
	{ExitInterrupted, "interrupted by SIGINT/SIGTERM/SIGHUP: the transaction stays open; run resume"},
}

// exitCodesHelp is the exit-code list of the --help texts, made from
// exitCodes.
var exitCodesHelp = func() string {
	var b strings.Builder
	b.WriteString("Exit codes:")
	for _, c := range exitCodes {
		fmt.Fprintf(&b, "\n  %d  %s", c.code, strings.ReplaceAll(c.summary, "\n", "\n     "))
	}
	return b.String()
}()

// usageError is an error the user fixes in the command line or an input
// file: exit code 2. cmdLine marks a mistake in the command line itself
// (a flag, an argument), after which Main points at the command's --help.
type usageError struct {
	err     error
	cmdLine bool
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err: err}
}

func usagef(format string, args ...any) error { return usage(fmt.Errorf(format, args...)) }

// cmdLineErrorf is a usage error in the command line: a bad or missing
// flag or argument.
func cmdLineErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...), cmdLine: true}
}

// codeError carries an explicit exit code (a command that reports its own
// outcome, e.g. a successful explicit rollback).
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// ranError marks an error returned by a command's own code, as opposed to
// cobra's parsing (unknown command, bad arguments), which is bad usage.
type ranError struct{ err error }

func (e *ranError) Error() string { return e.err.Error() }
func (e *ranError) Unwrap() error { return e.err }

// ExitCode classifies err: nil is ExitOK; the engine's and the journal's
// sentinels map to their codes; anything else is ExitError.
func ExitCode(err error) int {
	var ce *codeError
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, engine.ErrInterrupted):
		return ExitInterrupted
	case errors.Is(err, engine.ErrRollbackFailed):
		return ExitRollbackFailed
	case errors.Is(err, engine.ErrRolledBack):
		return ExitRolledBack
	case errors.Is(err, journal.ErrLocked), errors.Is(err, manifest.ErrLocked), errors.Is(err, journal.ErrTxnOpen),
		errors.Is(err, cluster.ErrBusy), errors.Is(err, cluster.ErrHalted), errors.Is(err, cluster.ErrLockTimeout):
		return ExitBusy
	case errors.Is(err, engine.ErrNothingToDo):
		return ExitOK
	}
	return ExitError
}

// globals are the flags every command takes.
type globals struct {
	manifestDir string
	stateDir    string
	dl          engine.Deadlines
	coord       engine.Coordination
	keep        int
	lockTimeout time.Duration
	logLevel    string
	output      string
	metricsFile string
	procScope   string
	noSurge     bool // --no-surge: every replacement stop-then-start
	dirLocked   bool // this process holds the manifest dir's flock
	api         apiSettings
	cri         criOptions

	// flags holds every flag bound to these fields (the global ones and
	// the transaction flags of run, resume and rollback), so that the
	// config file and the environment can fill in any of them.
	flags *pflag.FlagSet
	// cfg is the config file read by setup; nil before. origin says
	// where each flag set from the environment or the file came from.
	cfg    *config
	origin map[string]string

	stdout, stderr io.Writer
	log            *slog.Logger
	// noRuntimeOnce says once per command that no container runtime
	// answers (noRuntime).
	noRuntimeOnce sync.Once
	scanner       *proc.Scanner
	start         time.Time
}

func (g *globals) journalPath() string  { return filepath.Join(g.stateDir, JournalFile) }
func (g *globals) progressPath() string { return filepath.Join(g.stateDir, ProgressFile) }
func (g *globals) snapshotRoot() string { return filepath.Join(g.stateDir, SnapshotsDir) }

// cmdline is the command line an operator runs to do args ("resume",
// "init --state FILE") on this node: "stratum-upgrade ARGS", followed by
// --state-dir and --manifest-dir when they are not the built-in defaults,
// so that a suggested command acts on the directories this one did, from
// any shell. Every command a message suggests is made here.
func (g *globals) cmdline(args string) string {
	var b strings.Builder
	b.WriteString("stratum-upgrade ")
	b.WriteString(args)
	if g.stateDir != "" && g.stateDir != DefaultStateDir {
		b.WriteString(" --state-dir " + shellQuote(g.stateDir))
	}
	if g.manifestDir != "" && g.manifestDir != manifest.DefaultDir {
		b.WriteString(" --manifest-dir " + shellQuote(g.manifestDir))
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (g *globals) storeOptions() manifest.Options {
	return manifest.Options{Scanner: g.scanner, Logger: g.log}
}

// nodeState reads the persisted node state; without one the error wraps
// journal.ErrNoState, and its advice names the init command to run.
func nodeState(j *journal.Journal) (*nodestate.NodeState, error) {
	return j.NodeState()
}

// refuseOpenTxn fails with an error wrapping journal.ErrTxnOpen when a
// transaction is open.
func refuseOpenTxn(j *journal.Journal, what string) error {
	open, err := j.OpenTxn()
	if err != nil {
		return err
	}
	if open != nil {
		return fmt.Errorf("%s: %w: transaction %s (%s) is in phase %s", what, journal.ErrTxnOpen, open.ID, open.Kind, open.Phase)
	}
	return nil
}

// Main runs stratum-upgrade with args (without the program name), writing
// to stdout and stderr, and returns the exit code. It never calls os.Exit.
//
// A panic in the command's goroutine is a bug: Main recovers it, prints
// one "internal error" line (no goroutine dump), writes the stack to a
// file in os.TempDir() that the line names, and returns ExitError. A panic
// in another goroutine still crashes the process.
func Main(args []string, stdout, stderr io.Writer) (code int) {
	g := &globals{stdout: stdout, stderr: stderr, start: time.Now()}
	defer func() {
		if r := recover(); r != nil {
			code = g.internalError(r, debug.Stack())
			writeErrorJSON(g, args, stdout, fmt.Sprintf("internal error: %v (a bug: stderr says where the stack trace is)", r), code)
		}
	}()
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(context.Background())
	if err == nil {
		return ExitOK
	}
	var re *ranError
	if !errors.As(err, &re) {
		if hint := g.habitHint(args, err); hint != "" {
			err = fmt.Errorf("%w; %s", err, hint)
		}
		err = &usageError{err: err, cmdLine: true} // cobra's own parsing: unknown command, bad args
	}
	err = g.asRoot(err)
	code = ExitCode(err)
	if code != ExitOK {
		fmt.Fprintf(stderr, "stratum-upgrade: %s\n", g.withAdvice(err))
		var ue *usageError
		if errors.As(err, &ue) && ue.cmdLine {
			if cmd == nil {
				cmd = root
			}
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
		writeErrorJSON(g, args, stdout, g.withAdvice(err), code)
	}
	return code
}

// panicSeam, when set (by tests only: nothing in the product sets it), is
// called before every command body, so a test can make one panic.
var panicSeam func()

// internalError reports the recovered panic r and returns ExitError.
func (g *globals) internalError(r any, stack []byte) int {
	where := "it could not be saved"
	if f, err := os.CreateTemp("", "stratum-upgrade-panic-*.txt"); err == nil {
		fmt.Fprintf(f, "stratum-upgrade %s: panic: %v\n\n%s", Version, r, stack)
		if err := f.Close(); err == nil {
			where = "saved in " + f.Name()
		}
	}
	fmt.Fprintf(g.stderr, "stratum-upgrade: internal error: %v (a bug: please report it with the stack trace, %s). The command stopped there and wrote nothing more; what it did before is journaled: `%s` shows the node, and `%s` continues an open transaction\n", r, where, g.cmdline("status"), g.cmdline("resume"))
	return ExitError
}

// ran wraps a command body so its errors are told apart from cobra's.
func ran(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if panicSeam != nil {
			panicSeam()
		}
		if err := fn(cmd, args); err != nil {
			return &ranError{err}
		}
		return nil
	}
}

// Root is the command tree with every flag and help text, writing to
// stdout and stderr, for what is generated from it: the man pages and the
// shell completion scripts of make dist.
func Root(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr, start: time.Now()}
	root := newRoot(g)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "stratum-upgrade",
		Short: "Own a control-plane node's static pod manifests and upgrade them as a journaled transaction",
		Long: `stratum-upgrade is the sole writer of a Kubernetes control-plane node's static pod
manifest directory. It renders every manifest from one persisted node state and
upgrades them as a journaled transaction: snapshot, re-render in roster order
waiting for kubelet to replace each process and for the new one to answer,
verify through a soak window, then commit, or roll back to the snapshot. A crash
at any moment is recovered by 'stratum-upgrade resume'.

Defaults for the flags can be set once in ` + DefaultConfigFile + ` (another file
with ` + configEnv + `) or in STRATUM_<FLAG> environment variables
(STRATUM_STATE_DIR, STRATUM_MANIFEST_DIR, ...); a flag wins over the
environment, which wins over the file (docs/cli.md, "Configuration").

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: ran(func(cmd *cobra.Command, args []string) error {
			if err := g.setup(cmd); err != nil {
				return err
			}
			if err := acceptBareVersion(cmd); err != nil {
				return err
			}
			g.warnUnknownPatch(cmd)
			return nil
		}),
	}
	cobra.EnableCommandSorting = false // workflow order, as added below
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err, cmdLine: true} })

	g.flags = g.defineFlags()
	for _, name := range globalFlags {
		root.PersistentFlags().AddFlag(g.flags.Lookup(name))
	}
	// --help is known to the root before the command is looked up, so that
	// "--help -o json" reads -o's value as a value, not as a command.
	root.InitDefaultHelpFlag()
	// Before the completion command is made: it keeps the writer it sees.
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.AddCommand(
		newInitCmd(g), newRenderCmd(g), newPlanCmd(g), newRunCmd(g), newFinishCmd(g), newApplyCmd(g), newRestartCmd(g), newStopCmd(g), newStartCmd(g), newResumeCmd(g),
		newRollbackCmd(g), newImagesCmd(g), newStatusCmd(g), newStateCmd(g), newClearHaltCmd(g), newForgetNodeCmd(g), newHistoryCmd(g), newAuditCmd(g), newVersionCmd(g),
	)
	g.conventions(root)
	return root
}

// list formats names for a text line: "-" when empty.
func list(names []string) string {
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ", ")
}
