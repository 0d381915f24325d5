package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/metrics"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
)

func newRunCmd(g *globals) *cobra.Command {
	var to string
	var ignore []string
	var dryRun, twoStep bool
	cmd := &cobra.Command{
		Use:   "run --to VERSION|RELEASE [--two-step] [--dry-run]",
		Short: "Upgrade the node to a Kubernetes version or a release as one journaled transaction",
		Long: `run upgrades the node to VERSION or RELEASE: snapshot the manifests (and etcd's
data when etcd's image changes), write each changed manifest in roster order and
wait for kubelet to replace the process and the new one to answer, verify every
component through the soak window, then commit. Any failure rolls back to the
snapshot.

--to takes a Kubernetes version or a release file. A version (v1.36.3) moves
kube-apiserver, kube-controller-manager and kube-scheduler to it (a pinned image
keeps its repository, an unpinned one comes from the node's imageRepository)
and etcd to the version kubeadm pairs with its minor, never down; 'plan' alone
lists the versions available. A release file pins the images it names. A target
whose kubernetesVersion is not kube-apiserver's version is refused (exit 1).

Output: one line per step with the time since the start and what it waits for;
with --output json one engine event per line, then a final {"result": ...} line.

A release that changes nothing prints "nothing to do" and exits 0: the node
already runs it. SIGINT, SIGTERM or SIGHUP stops the wait at once and leaves
the transaction open (exit 6); 'stratum-upgrade resume' continues it. A closed
stdout (a pipe whose reader exited) does not stop it.

Before anything is written, run runs the pre-flight checks (upgrade paths,
version skew, etcd's health when etcd changes; docs/cli.md): a failed check
refuses the release (exit 1, nothing written) and says which release would be
valid. --ignore-preflight-errors=NAME,... (or all) turns a failure into a
warning; the journal records the checks a transaction was let through with.

--two-step takes a minor move as the binary step of a two-step upgrade: the
new binaries of kube-apiserver, kube-controller-manager and kube-scheduler run
with --emulated-version at the old minor, so 'rollback --last' can take the node
back to the old binaries; 'stratum-upgrade finish' takes the finishing step.

` + exitCodesHelp,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			var rel *engine.Release
			var raw []byte
			var err error
			version := byVersion(to) // once: it looks for a file of that name
			if !version {
				if rel, raw, err = loadRelease(to); err != nil {
					return err
				}
			}
			opts, err := upgradeOptions(ignore)
			if err != nil {
				return err
			}
			opts.TwoStep = twoStep
			if dryRun { // plan --to VERSION|RELEASE
				if version {
					return g.runPlanVersion(to, opts)
				}
				return g.runPlan(to, opts)
			}
			return g.drive("run", func(ctx context.Context, e *engine.Engine, j *journal.Journal) (engine.Result, error) {
				st, err := nodeState(j)
				if err != nil {
					return engine.Result{}, err
				}
				if version {
					if rel, raw, err = releaseForVersion(st, to); err != nil {
						return engine.Result{}, err
					}
				}
				if err := applyRelease(rel, st, to); err != nil {
					return engine.Result{}, err
				}
				res, err := e.RunWith(ctx, rel, raw, opts)
				g.preflightRefused(err)
				return res, g.finishHint(st, err)
			})
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", toFlagHelp)
	cmd.Flags().BoolVar(&twoStep, "two-step", false, "a minor move's binary step: the new binaries emulate the old minor until 'finish'")
	preflightFlag(cmd, &ignore)
	g.criFlags(cmd, true, true)
	dryRunFlag(cmd, &dryRun, "plan --to VERSION|RELEASE: the pre-flight checks and what it would change")
	return cmd
}

func newResumeCmd(g *globals) *cobra.Command {
	var prepare bool
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Continue the open transaction from its last journaled step",
		Long: `resume continues the open transaction from its last durable step: forwards
while it was applying or verifying, backwards once it was rolling back. With no
open transaction (or no journal at all) it prints "nothing to do" and exits 0,
so it is safe to run at every boot. An empty (0-byte) or damaged journal, or a
state directory whose snapshots show it had a journal, fails it (exit 1) and
nothing is written: no command initialises a journal file that exists.

resume --prepare is the boot step that runs before kubelet: it only sweeps
staging leftovers from the manifest directory and reports the open transaction,
without waiting for anything (kubelet is not running yet). The full resume runs
after kubelet (deploy/systemd, docs/operations.md).

` + exitCodesHelp,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			ok, err := g.journalExists()
			if err != nil {
				return err
			}
			if !ok {
				return g.nothing("resume", fmt.Sprintf("nothing to do: no journal at %s (nothing was imported or upgraded on this node)", g.journalPath()))
			}
			if prepare {
				return g.prepare()
			}
			return g.drive("resume", func(ctx context.Context, e *engine.Engine, _ *journal.Journal) (engine.Result, error) {
				return e.Resume(ctx)
			})
		}),
	}
	cmd.Flags().BoolVar(&prepare, "prepare", false, "boot step before kubelet: sweep staging leftovers and report the open transaction; no waits")
	return cmd
}

func newRollbackCmd(g *globals) *cobra.Command {
	var last, dryRun bool
	var reason string
	cmd := &cobra.Command{
		Use:   "rollback [--last [--dry-run]]",
		Short: "Roll back the open transaction, or with --last undo the last committed one",
		Long: `rollback rolls back the open transaction, whatever its phase: restore its
snapshot (and, for a single-member cluster, etcd's data when a newer etcd
minor wrote to it: downgraded with etcd's own protocol, or restored from the
backup only when that cannot run),
restart each component it wrote, and wait until every component of the old
roster answers. It exits 0 when the node is back as it was, 4 when the rollback
failed.

rollback --last undoes the last committed transaction as a new one (kind
rollback-last) with the same waits, verification and automatic rollback as an
upgrade: an upgrade or an apply by putting back its retained snapshot and node
state, a stop by starting what it stopped, a start by stopping what it started.
Restarts change nothing and are passed over: the transaction undone is the
last that changed the node (only restarts committed: exit 0, nothing to do). What it cannot undo (a
rollback --last, a removed snapshot) is refused before anything is journaled
(exit 1), naming the command to run instead. Exit 0 committed, 3 it failed and
was undone, 4 its rollback failed. etcd's data is not restored by --last: after
a commit it holds writes the snapshot does not. rollback --last --dry-run
prints what it would change, with a diff of each manifest, and writes nothing.

` + exitCodesHelp,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if dryRun && !last {
				return cmdLineErrorf("rollback: --dry-run goes with --last: `rollback --last --dry-run` shows what undoing the last committed transaction would change")
			}
			if dryRun {
				return g.rollbackLastDryRun()
			}
			if last {
				return g.drive("rollback", func(ctx context.Context, e *engine.Engine, _ *journal.Journal) (engine.Result, error) {
					return e.RollbackLast(ctx)
				})
			}
			ok, err := g.journalExists()
			if err != nil {
				return err
			}
			if !ok {
				return g.noJournal()
			}
			err = g.drive("rollback", func(ctx context.Context, e *engine.Engine, j *journal.Journal) (engine.Result, error) {
				open, err := j.OpenTxn()
				if err != nil {
					return engine.Result{}, err
				}
				if open == nil {
					return engine.Result{}, g.noOpenTxn()
				}
				if open.Phase == journal.PhaseRollingBack && cmd.Flags().Changed("reason") && reason != open.Reason {
					// The journal keeps the reason the rollback began with.
					fmt.Fprintf(g.stderr, "stratum-upgrade: warning: --reason is not recorded: transaction %s is already rolling back, for: %s\n", open.ID, open.Reason)
				}
				return e.Rollback(ctx, reason)
			})
			if errors.Is(err, engine.ErrRolledBack) {
				// The command did what it was asked: the node is back.
				return nil
			}
			return err
		}),
	}
	cmd.Flags().BoolVar(&last, "last", false, "undo the last committed transaction (upgrade, apply, stop or start)")
	cmd.Flags().StringVar(&reason, "reason", "rolled back by the operator (stratum-upgrade rollback)", "why, recorded in the journal")
	dryRunFlag(cmd, &dryRun, "with --last: the changes that undo the last committed transaction")
	g.criFlags(cmd, true, true)
	return cmd
}

// noOpenTxn is rollback's error with no transaction open (exit 1): it
// names the journal looked at, and --last for an upgrade that committed.
func (g *globals) noOpenTxn() error {
	return fmt.Errorf("no open transaction to roll back in journal %s; to undo the last committed transaction, run `%s`", g.journalPath(), g.cmdline("rollback --last"))
}

// nothing reports that a command had nothing to do (exit 0).
func (g *globals) nothing(command, msg string) error {
	if g.json() {
		return g.write(finalLine{Result: engine.Result{Outcome: engine.Nothing, Reason: msg}, Outcome: string(engine.Nothing), ExitCode: ExitOK})
	}
	fmt.Fprintln(g.stdout, msg)
	return nil
}

// drive opens the journal and the store, runs one engine call under a
// context that SIGINT, SIGTERM and SIGHUP cancel (SIGPIPE ignored), reports every event and the
// result, and writes the progress and metrics files.
func (g *globals) drive(command string, call func(context.Context, *engine.Engine, *journal.Journal) (engine.Result, error)) error {
	j, err := g.openJournal(false)
	if err != nil {
		return err
	}
	defer j.Close()
	return g.driveWith(j, command, call)
}

// driveWith is drive on the journal j, open read-write.
func (g *globals) driveWith(j *journal.Journal, command string, call func(context.Context, *engine.Engine, *journal.Journal) (engine.Result, error)) error {
	store, err := manifest.Open(g.manifestDir, g.storeOptions())
	if err != nil {
		return err
	}
	rep := &reporter{g: g, command: command, start: time.Now(), pid: os.Getpid()}
	cv := g.openCluster(j)
	defer cv.finish() // after the result is shown: the API server never delays it
	e, err := engine.New(engine.Config{
		Journal: j, Store: store, Scanner: g.scanner, Snapshots: g.snapshotRoot(),
		Keep: g.keep, Deadlines: g.dl, Log: g.log, Coordination: g.coord, Images: g.engineImages(),
		APIServers: cv.apiServers(), Kubelet: cv.kubelet(), NoSurge: g.noSurge,
		Events: func(ev engine.Event) { rep.event(ev); cv.event(ev) }, Ended: cv.ended,
	})
	if err != nil {
		return err
	}
	// SIGHUP (the ssh session or terminal went away) is handled as SIGINT
	// and SIGTERM: the transaction stops at once and stays open for
	// resume, instead of the process dying wherever it was.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A closed stdout or stderr (a `| head` that exited, a dropped ssh
	// session) must not kill a transaction: Go's default exits on SIGPIPE
	// from a write to fd 1 or 2. Notified, the write fails with EPIPE
	// instead, and the reporter ignores its write errors. The channel is
	// never read: a signal delivered to a full channel is dropped. It is
	// never stopped either: the result and the error are written after
	// the transaction, and the exit code must still be the transaction's.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	res, err := call(ctx, e, j)
	if errors.Is(err, engine.ErrNothingToDo) || (err == nil && res.Outcome == engine.Nothing) {
		msg := "nothing to do: no open transaction"
		if err != nil {
			msg = err.Error()
		}
		return g.nothing(command, msg)
	}
	outcome := outcomeOf(res, err)
	if res.Outcome == "" {
		// Interrupted, or an error: the result always says how it ended.
		res.Outcome = engine.Outcome(outcome)
	}
	if rep.last != nil {
		rep.writeProgress(nil, outcome, g.errString(err))
	}
	if res.Txn != "" && g.metricsFile != "" {
		if merr := g.writeMetrics(command, j, res, outcome); merr != nil {
			g.log.Error("metrics file not written; the transaction's outcome is unaffected", "err", merr)
			fmt.Fprintf(g.stderr, "stratum-upgrade: warning: %v\n", merr)
		}
	}
	rep.result(res, outcome, err)
	return rep.shown(err)
}

// outcomeOf names how a driven transaction ended, for the result line, the
// progress file and the metrics: committed, rolled-back, rollback-failed,
// interrupted or error.
func outcomeOf(res engine.Result, err error) string {
	switch {
	case res.Outcome == engine.Committed || res.Outcome == engine.RolledBack || res.Outcome == engine.RollbackFailed:
		return string(res.Outcome)
	case errors.Is(err, engine.ErrInterrupted):
		return "interrupted"
	case err == nil:
		return string(engine.Committed)
	}
	return "error"
}

func (g *globals) errString(err error) string { return g.withAdvice(err) }

func (g *globals) writeMetrics(command string, j *journal.Journal, res engine.Result, outcome string) error {
	u := metrics.Upgrade{Command: command, Txn: res.Txn, Result: outcome, Duration: res.Elapsed, Finished: time.Now()}
	if t, err := j.Txn(res.Txn); err == nil {
		u.Kind = t.Kind
	}
	for _, s := range res.Steps {
		u.Steps = append(u.Steps, metrics.Step{Component: s.Component, Phase: s.Phase, Duration: s.Elapsed})
	}
	return metrics.WriteFile(g.metricsFile, u)
}

// finalLine is the last line of run, resume and rollback with --output
// json: the engine's Result, the outcome name, the exit code and the error.
type finalLine struct {
	Result   engine.Result `json:"result"`
	Outcome  string        `json:"outcome"`
	ExitCode int           `json:"exitCode"`
	Error    string        `json:"error,omitempty"`
}

// reporter prints engine events and results and keeps the progress file.
//
// In text a failure's reason is printed once, where it happens (the
// "rolling back: REASON" line, or the rollback's own failure); the lines
// after it, the summary and the error on stderr refer to it. JSON events
// and the JSON result keep the full reason in their fields.
type reporter struct {
	g       *globals
	command string
	start   time.Time
	pid     int
	txn     string
	last    *engine.Event
	// reason is the failure this run printed in its "rolling back" line.
	reason string
	// printed: the outcome's reason is on a line above.
	printed bool
}

// event is the engine's Events callback.
func (r *reporter) event(ev engine.Event) {
	r.txn = ev.Txn
	r.writeProgress(&ev, "", "")
	if r.g.json() {
		_ = r.g.write(eventOut(ev))
		return
	}
	fmt.Fprintln(r.g.stdout, r.line(ev))
}

// line is one text line for ev: "[  12.3s] etcd: waiting for kubelet to
// replace etcd (at most 3m0s)".
func (r *reporter) line(ev engine.Event) string {
	msg := ev.Message
	switch ev.Step {
	case "wait-active":
		if ev.Waiting != "" {
			msg = "waiting for " + ev.Waiting
		}
	case "rollback":
		r.reason = strings.TrimPrefix(ev.Message, "rolling back: ")
	case "rolled-back":
		if r.reason != "" && ev.Message == "rolled back: "+r.reason {
			msg = "rolled back (reason above)"
		}
		r.printed = true
	case "rollback-failed":
		if rest, ok := strings.CutPrefix(ev.Message, r.reason+"; then the rollback failed: "); ok && r.reason != "" {
			msg = "the rollback failed too: " + rest
		}
		r.printed = true
	}
	if d, ok := r.deadline(ev.Step); ok {
		msg += fmt.Sprintf(" (at most %s)", d)
	}
	if ev.Component != "" {
		msg = ev.Component + ": " + msg
	}
	return fmt.Sprintf("[%6.1fs] %s", ev.Time.Sub(r.start).Seconds(), msg)
}

// deadline is the deadline that bounds the wait a step starts.
func (r *reporter) deadline(step string) (time.Duration, bool) {
	dl := r.g.dl
	switch step {
	case "wait-replaced", "wait-surge":
		return dl.Replace, true
	case "wait-active", "wait-surge-active":
		return dl.Active, true
	case "etcd-stop", "wait-gone", "surge-remove":
		return dl.Stop, true
	case "etcd-backup":
		return dl.EtcdBackup, true
	case "etcd-caught-up":
		return dl.Active, true
	case "cluster-lock":
		return r.g.coord.Wait, true
	case "image-pull":
		if r.g.cri.pullTimeout == 0 {
			return engine.DefaultPullTimeout, true
		}
		return r.g.cri.pullTimeout, true
	}
	return 0, false
}

// result prints the final line.
func (r *reporter) result(res engine.Result, outcome string, err error) {
	code := ExitCode(err)
	if r.command == "rollback" && errors.Is(err, engine.ErrRolledBack) && res.Outcome == engine.RolledBack {
		code = ExitOK
	}
	if r.g.json() {
		_ = r.g.write(finalLine{Result: res, Outcome: outcome, ExitCode: code, Error: r.g.errString(err)})
		return
	}
	elapsed := fmt.Sprintf("%.1fs", time.Since(r.start).Seconds())
	var line string
	switch outcome {
	case "committed":
		line = fmt.Sprintf("committed %s in %s: %s", res.Txn, elapsed, list(res.Changed))
	case "rolled-back":
		line = fmt.Sprintf("rolled back %s after %s: the node runs what it ran before (reason above)", res.Txn, elapsed)
		if !r.printed {
			line = fmt.Sprintf("rolled back %s after %s: the node runs what it ran before; reason: %s", res.Txn, elapsed, res.Reason)
		}
	case "rollback-failed":
		line = fmt.Sprintf("ROLLBACK FAILED %s after %s: the node needs an operator; the reasons are above and in `%s`, each component's state in `%s` (docs/operations.md)", res.Txn, elapsed, r.g.cmdline("history "+res.Txn), r.g.cmdline("status"))
	case "interrupted":
		txn := res.Txn
		if txn == "" {
			txn = r.txn
		}
		line = fmt.Sprintf("interrupted after %s: transaction %s is still open; `%s` continues it", elapsed, txn, r.g.cmdline("resume"))
	default:
		if res.Txn == "" && r.txn == "" {
			return // failed before a transaction began: the error says it all
		}
		txn := res.Txn
		if txn == "" {
			txn = r.txn
		}
		line = fmt.Sprintf("failed after %s in transaction %s (the error follows on stderr)", elapsed, txn)
	}
	fmt.Fprintln(r.g.stdout, line)
}

// shown is the error the command returns, to be printed on stderr: in
// text, an upgrade that rolled back or a rollback that failed printed its
// reasons above, so the error refers to them instead of repeating them.
// It wraps err: the exit code and the advice are err's.
func (r *reporter) shown(err error) error {
	if r.g.json() || !r.printed {
		return err
	}
	switch {
	case errors.Is(err, engine.ErrRollbackFailed):
		return &referError{"rollback failed (the reasons are above)", err}
	case errors.Is(err, engine.ErrRolledBack):
		return &referError{"upgrade rolled back (reason above)", err}
	}
	return err
}

// referError is an error whose reason was printed already: its message
// refers to it; it wraps the error itself.
type referError struct {
	msg string
	err error
}

func (e *referError) Error() string { return e.msg }
func (e *referError) Unwrap() error { return e.err }

// prepare is resume --prepare: the wait-free boot step before kubelet.
func (g *globals) prepare() error {
	j, err := g.openJournal(false)
	if err != nil {
		return err
	}
	defer j.Close()
	open, err := j.OpenTxn()
	if err != nil {
		return err
	}
	out := map[string]any{"openTransaction": nil, "swept": nil, "strays": nil} // null: not known
	var lines []string
	if store, err := manifest.Open(g.manifestDir, g.storeOptions()); err != nil {
		if open != nil {
			return err
		}
		lines = append(lines, err.Error()) // it names the manifest dir
	} else {
		sw, err := store.Sweep()
		if err != nil {
			return err
		}
		out["swept"], out["strays"] = nonNil(sw.Swept), nonNil(sw.Strays)
		lines = append(lines, "swept:        "+list(sw.Swept), "strays:       "+list(sw.Strays))
		for _, st := range sw.Strays {
			lines = append(lines, fmt.Sprintf("              %s: %s", st, store.StrayNote(st)))
		}
	}
	if open == nil {
		lines = append([]string{"no open transaction: nothing to resume"}, lines...)
	} else {
		info, err := txnView(j, open)
		if err != nil {
			return err
		}
		out["openTransaction"] = info
		lines = append([]string{fmt.Sprintf("transaction %s (%s) is open in phase %s: the full `%s` continues it once kubelet runs", open.ID, open.Kind, open.Phase, g.cmdline("resume"))}, lines...)
	}
	if g.json() {
		return g.write(out)
	}
	for _, l := range lines {
		fmt.Fprintln(g.stdout, l)
	}
	return nil
}
