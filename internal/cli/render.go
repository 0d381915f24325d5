package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

func newInitCmd(g *globals) *cobra.Command {
	var stateFile string
	var force, dryRun, allAtOnce bool
	var ad adoptFlags
	var ignore []string
	cmd := &cobra.Command{
		Use:   "init --state FILE",
		Short: "Import a node state and render every manifest from it",
		Long: `init imports the node state in FILE into the journal, creating the state
directory and the journal if needed, records the manifest directory in the
journal, and renders every manifest of the node into the manifest directory
(creating it if needed), overwriting what is there. It is the only command
that creates the journal; every other one refuses to run without it.

A journal that already holds a node state is refused unless --force is given;
init is refused while a transaction is open, --force or not. Every later
command that writes manifests refuses another --manifest-dir than the one
recorded; init --force --manifest-dir NEW moves the node to NEW (the old
directory is left as it is: point kubelet's staticPodPath at NEW).

On a live node (a manifest that would change belongs to a component whose
processes run: manifests another tool wrote, or init --force of a new state),
init changes those manifests as render does: one transaction, one component at
a time with the waits, rolled back on failure (exit 3, as run). init --force
replaces the journal's node state only when that transaction commits, as apply
--state does: after a rollback the journal keeps the old state, whose render
the node runs, and a field no transaction can change is refused. Into a
journal with no node state, the state is imported first and stays after a
rollback (render retries). --all-at-once writes them at once;
--dry-run validates FILE and prints what would change, with a diff of each
manifest, and writes nothing (no journal, no directory).

--from-kubeadm adopts a node kubeadm made, instead of --state FILE: it reads
the manifests in the manifest directory (and kubeadm's configuration file with
--kubeadm-config), derives the node state they run, and prints it with, per
component, whether rendering it would make kubelet restart the component and
why. Nothing is written without --yes. With --yes the state is imported and
every manifest rewritten, which kubelet sees as the same pods: nothing
restarts. Adoption that would restart a component is refused unless
--allow-restart is given; then those components are replaced one at a time
with the waits. An external etcd, a file in the directory that is not a
component's manifest, or a manifest edited beyond what the state expresses is
refused with the reason. docs/adopting-kubeadm.md has the steps.`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if dryRun && allAtOnce {
				return cmdLineErrorf("init: --dry-run and --all-at-once are exclusive")
			}
			if err := ad.check(stateFile, dryRun, allAtOnce); err != nil {
				return err
			}
			opts, err := upgradeOptions(ignore)
			if err != nil {
				return err
			}
			if ad.fromKubeadm {
				return g.adoptKubeadm(ad, force, opts)
			}
			if dryRun {
				return g.initDryRun(stateFile, force)
			}
			return g.runInit(stateFile, force, allAtOnce, opts)
		}),
	}
	cmd.Flags().StringVar(&stateFile, "state", "", "node state file (YAML, kind NodeState)")
	cmd.Flags().BoolVar(&force, "force", false, "replace the node state the journal already holds")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate FILE and print what init would change, with a diff of each manifest; write nothing")
	cmd.Flags().BoolVar(&allAtOnce, "all-at-once", false, "write every changed manifest at once, without a transaction, even on a live node")
	cmd.Flags().BoolVar(&ad.fromKubeadm, "from-kubeadm", false, "adopt a node kubeadm made: derive the node state from the manifests in the manifest directory (and --kubeadm-config), show what adopting would restart; with --yes, import it")
	cmd.Flags().StringVar(&ad.configFile, "kubeadm-config", "", "with --from-kubeadm: kubeadm's configuration file (InitConfiguration/ClusterConfiguration/JoinConfiguration), cross-checked against the manifests")
	cmd.Flags().BoolVar(&ad.yes, "yes", false, "with --from-kubeadm: import the derived node state and render it (without it, nothing is written)")
	cmd.Flags().BoolVar(&ad.allowRestart, "allow-restart", false, "with --from-kubeadm --yes: adopt even when the render restarts components (each one at a time, with the waits)")
	preflightFlag(cmd, &ignore)
	return cmd
}

// checkRenders renders every manifest and derived file of st without
// writing anything, so that a state that cannot be rendered (a cis profile
// whose files are missing) is refused before it is persisted.
func checkRenders(st *nodestate.NodeState) error {
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		return err
	}
	if _, err := manifest.DerivedFiles(st, prof); err != nil {
		return err
	}
	for _, name := range manifest.NamesFor(st) {
		if _, err := manifest.RenderBytes(st, prof, name, ""); err != nil {
			return err
		}
	}
	return nil
}

// initDryRun is init --dry-run: FILE validated, what init would refuse
// refused (a journal holding a node state, without --force; an open
// transaction), and the render it would make planned against the manifest
// directory; nothing is created.
func (g *globals) initDryRun(stateFile string, force bool) error {
	st, err := loadStateFile(stateFile)
	if err != nil {
		return err
	}
	if err := resolve.CheckKubernetesVersion(resolve.Resolve(st)); err != nil {
		return fmt.Errorf("node state %s: %w", stateFile, err)
	}
	if err := g.initWouldRefuse(stateFile, force); err != nil {
		return err
	}
	if _, err := os.Lstat(g.manifestDir); errors.Is(err, fs.ErrNotExist) {
		rep := &dryRunReport{Command: "init"}
		rep.note("node state %s is valid; the manifest directory %s does not exist: init would create it and write %s", stateFile, g.manifestDir, list(manifest.NamesFor(st)))
		for _, c := range manifest.NamesFor(st) {
			rep.Changes = append(rep.Changes, dryRunChange{Component: c, Path: filepath.Join(g.manifestDir, c+".yaml"), New: true})
		}
		return g.printDryRunReport(rep)
	}
	if !g.json() {
		fmt.Fprintf(g.stdout, "init --dry-run: node state %s (%s, %s) is valid\n", stateFile, st.NodeName, st.KubernetesVersion)
	}
	return g.dryRun("init", st)
}

// initWouldRefuse is init's refusals that its dry run can tell from the
// journal opened read-only: an open transaction, and a node state already
// there without force.
func (g *globals) initWouldRefuse(stateFile string, force bool) error {
	ok, err := g.journalExists()
	if err != nil || !ok {
		return err
	}
	j, err := g.open(true)
	if err != nil {
		return err
	}
	defer j.Close()
	if err := refuseOpenTxn(j, "init"); err != nil {
		return err
	}
	cur, err := j.NodeState()
	switch {
	case err == nil && !force:
		return g.stateHeld(j, cur, stateFile)
	case err != nil && !errors.Is(err, journal.ErrNoState) && !force:
		return err
	}
	return nil
}

// stateHeld is init's refusal of a journal j that holds cur already.
func (g *globals) stateHeld(j *journal.Journal, cur *nodestate.NodeState, stateFile string) error {
	replace := "init --force --state FILE"
	if stateFile != "" {
		replace = "init --force --state " + shellQuote(stateFile)
	}
	return fmt.Errorf("init: journal %s already holds the node state of %s (%s); `%s` re-renders it, `%s` replaces it",
		j.Path(), cur.NodeName, cur.KubernetesVersion, g.cmdline("render"), g.cmdline(replace))
}

func (g *globals) runInit(stateFile string, force, allAtOnce bool, opts engine.UpgradeOptions) error {
	st, err := loadStateFile(stateFile)
	if err != nil {
		return err
	}
	if err := resolve.CheckKubernetesVersion(resolve.Resolve(st)); err != nil {
		return fmt.Errorf("node state %s: %w", stateFile, err)
	}
	return g.importState(st, stateFile, force, allAtOnce, opts)
}

// importState is init's work once st is read from stateFile (or derived,
// by init --from-kubeadm): the journal created, st imported, and the
// manifest directory brought to its render, through a transaction where a
// running component's manifest changes (with opts's pre-flight checks).
func (g *globals) importState(st *nodestate.NodeState, stateFile string, force, allAtOnce bool, opts engine.UpgradeOptions) (err error) {
	// Both directories are checked before either is created, and the
	// manifest directory is created first: a bad one fails before the
	// state directory and the journal exist.
	if err := checkCreatable("manifest dir", g.manifestDir); err != nil {
		return err
	}
	if err := checkCreatable("state directory", g.stateDir); err != nil {
		return err
	}
	// A failed init leaves no directory it created empty behind (a
	// mistyped --manifest-dir, refused).
	made := missingDirs(g.manifestDir)
	defer func() {
		if err != nil {
			removeEmpty(made)
		}
	}()
	store, err := manifest.Create(g.manifestDir, g.storeOptions())
	if err != nil {
		return err
	}
	created := g.created()
	j, err := g.createJournal(force)
	if err != nil {
		return err
	}
	defer func() {
		if j != nil {
			j.Close()
		}
	}()
	// refused is what init returns when it is refused before a
	// transaction began: a journal and state directory it created are
	// removed, so that nothing is left behind.
	refused := func(err error) error {
		if created.journal && g.noTxnBegun(j) {
			j.Close()
			j = nil
			created.remove(g)
		}
		return err
	}
	if err := refuseOpenTxn(j, "init"); err != nil {
		return err
	}
	cur, err := j.NodeState()
	switch {
	case err == nil && !force:
		return g.stateHeld(j, cur, stateFile)
	case err != nil && !errors.Is(err, journal.ErrNoState) && !force:
		return err
	}
	if err != nil {
		cur = nil // none, or (--force) one that cannot be read: replaced
	}
	var rp *renderPlan
	var planErr error
	if !allAtOnce {
		rp, planErr = g.planRender(store, st)
	}
	if errors.Is(planErr, manifest.ErrShadowed) {
		// Nothing imported, as any other refusal before a transaction.
		return refused(refusedRender("init", planErr))
	}
	if cur != nil && (planErr != nil || rp != nil && len(rp.live) > 0) {
		// A node state is replaced on a live node: the transaction
		// carries st, and only its commit makes st the journal's node
		// state (as apply --state). A rollback leaves the state the node
		// runs, never one whose render it does not.
		return g.replaceLive(j, store, cur, st, stateFile, rp, planErr, opts)
	}
	if planErr == nil && rp != nil && len(rp.live) > 0 {
		// The transaction's own plan and pre-flight checks, before the
		// state is imported: a refusal imports nothing.
		if _, err := engine.PlanState(context.Background(), store, g.scanner, st, st, opts); err != nil && !errors.Is(err, engine.ErrNothingToDo) {
			g.preflightRefused(err)
			return refused(err)
		}
	}
	if err := j.PutNodeState(st); err != nil {
		return err
	}
	if err := g.recordManifestDir(j); err != nil {
		return err
	}
	if planErr != nil {
		return fmt.Errorf("init: the node state is imported but its render could not be planned (fix the cause, then run `%s`): %w", g.cmdline("render"), planErr)
	}
	if err := g.renderLive("init", j, store, st, rp, opts, false, fmt.Sprintf("imported node state of %s (%s) into %s", st.NodeName, st.KubernetesVersion, j.Path())); err != nil {
		if rp != nil && len(rp.live) > 0 && g.noTxnBegun(j) {
			// Refused before it began (busy, the cluster): the
			// journal this init created goes with it.
			return refused(err)
		}
		if rp != nil && len(rp.live) > 0 {
			// The transaction's own outcome; the imported state stays (the
			// journal held none before).
			if errors.Is(err, engine.ErrRolledBack) {
				return fmt.Errorf("init: %w; the imported node state stays in the journal: fix the cause, then run `%s`", err, g.cmdline("render"))
			}
			return err
		}
		return fmt.Errorf("init: the node state is imported but rendering failed (fix the cause, then run `%s`): %w", g.cmdline("render"), err)
	}
	return nil
}

// replaceLive is init --force of st over cur, the node state the journal
// holds, where the render of st changes the manifest of a running
// component: the transaction of renderLive applies st, and the journal
// keeps cur until it commits. Nothing is imported when the render cannot
// be planned (planErr) or a transaction cannot change cur to st.
func (g *globals) replaceLive(j *journal.Journal, store *manifest.Store, cur, st *nodestate.NodeState, stateFile string, rp *renderPlan, planErr error, opts engine.UpgradeOptions) error {
	again := "init --force --state FILE"
	if stateFile != "" {
		again = "init --force --state " + shellQuote(stateFile)
	}
	if planErr != nil {
		return fmt.Errorf("init: the render of the node state could not be planned; nothing is imported, the journal keeps the node state of %s (%s) (fix the cause, then run `%s` again): %w", cur.NodeName, cur.KubernetesVersion, g.cmdline(again), planErr)
	}
	if err := engine.CheckStateChange(cur, st); err != nil {
		return fmt.Errorf("init: the manifests of running components change (%s), so the new node state would go through a transaction, which cannot make this change; nothing is imported: %w; `%s` imports it and writes every manifest at once, without the waits or a rollback",
			list(rp.live), err, g.cmdline(strings.Replace(again, "init --force", "init --force --all-at-once", 1)))
	}
	if err := g.recordManifestDir(j); err != nil {
		return err
	}
	err := g.renderLive("init", j, store, st, rp, opts, true, "")
	if errors.Is(err, engine.ErrRolledBack) {
		return fmt.Errorf("init: %w; nothing is imported: the journal keeps the node state of %s (%s), whose render the node runs; fix the cause, then run `%s` again", err, cur.NodeName, cur.KubernetesVersion, g.cmdline(again))
	}
	if err != nil {
		return err
	}
	// The commit made st the journal's node state; with nothing left to
	// do (the manifests became its render meanwhile), it is imported here.
	return j.PutNodeState(st)
}

func newRenderCmd(g *globals) *cobra.Command {
	var dryRun, allAtOnce bool
	var ignore []string
	cmd := &cobra.Command{
		Use:   "render [--dry-run] [--all-at-once]",
		Short: "Re-render every manifest from the persisted node state",
		Long: `render makes the manifest directory hold exactly the render of the node state
in the journal: it is what runs when the controller starts. It writes only what
differs (a hand edit is overwritten), removes the manifest of a component that
left the roster, sweeps staging leftovers, and reports visible files that are
not ours (strays) without touching them. It is refused while a transaction is
open: resume or roll it back first.

On a live node, where a manifest that would change belongs to a component whose
processes run, render does not write them all at once (kubelet would restart
etcd and the API server together): it prints which, then changes them as one
transaction, one component at a time in roster order with the waits, exactly as
'apply' of the node state the journal holds, and rolls back on failure. Where
nothing that changes runs (a fresh node, a component down), it writes at once.
--all-at-once always writes at once (a node whose components are down and that
a transaction could not verify); --dry-run prints what would change, with a
diff of each manifest, and writes nothing. A stray that kubelet runs in place
of a component (etcd.yaml.bak) refuses a render that changes anything, and
its dry run too: move the stray out of the directory first.`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			if dryRun && allAtOnce {
				return cmdLineErrorf("render: --dry-run and --all-at-once are exclusive")
			}
			opts, err := upgradeOptions(ignore)
			if err != nil {
				return err
			}
			j, err := g.openJournal(dryRun)
			if err != nil {
				return err
			}
			defer j.Close()
			if err := refuseOpenTxn(j, "render"); err != nil {
				return err
			}
			st, err := nodeState(j)
			if err != nil {
				return err
			}
			if dryRun {
				return g.dryRun("render", st)
			}
			if _, err := os.Lstat(g.manifestDir); errors.Is(err, fs.ErrNotExist) {
				// Not created here: kubelet's staticPodPath that vanished
				// is the operator's to look at, not to paper over.
				return fmt.Errorf("render: the manifest directory %s does not exist (kubelet's staticPodPath; the journal records it); nothing is written: create it with `mkdir -p -m 0700 %s`, then run `%s`",
					g.manifestDir, shellQuote(g.manifestDir), g.cmdline("render"))
			}
			store, err := manifest.Open(g.manifestDir, g.storeOptions())
			if err != nil {
				return err
			}
			var rp *renderPlan
			if !allAtOnce {
				if rp, err = g.planRender(store, st); err != nil {
					return refusedRender("render", err)
				}
			}
			return g.renderLive("render", j, store, st, rp, opts, false, fmt.Sprintf("rendered node state of %s (%s)", st.NodeName, st.KubernetesVersion))
		}),
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, with a diff of each manifest; write nothing")
	cmd.Flags().BoolVar(&allAtOnce, "all-at-once", false, "write every changed manifest at once, without a transaction, even on a live node")
	preflightFlag(cmd, &ignore)
	return cmd
}

// writeReport is the JSON output of init and render.
type writeReport struct {
	Message     string   `json:"message"`
	ManifestDir string   `json:"manifestDir"`
	Written     []string `json:"written"`
	Unchanged   []string `json:"unchanged"`
	Removed     []string `json:"removed"`
	Derived     []string `json:"derived"`
	Swept       []string `json:"swept"`
	Strays      []string `json:"strays"`
}

func (g *globals) printWrite(msg string, store *manifest.Store, res manifest.WriteResult) error {
	if g.json() {
		return g.write(writeReport{
			Message: msg, ManifestDir: store.Dir(),
			Written: nonNil(res.Written), Unchanged: nonNil(res.Unchanged), Removed: nonNil(res.Removed),
			Derived: nonNil(res.Derived), Swept: nonNil(res.Swept), Strays: nonNil(res.Strays),
		})
	}
	w := g.stdout
	fmt.Fprintln(w, msg)
	fmt.Fprintf(w, "manifest dir: %s\n", store.Dir())
	fmt.Fprintf(w, "written:      %s\n", list(res.Written))
	fmt.Fprintf(w, "unchanged:    %s\n", list(res.Unchanged))
	fmt.Fprintf(w, "removed:      %s\n", list(res.Removed))
	if len(res.Derived) > 0 {
		fmt.Fprintf(w, "derived:      %s\n", list(res.Derived))
	}
	if len(res.Swept) > 0 {
		fmt.Fprintf(w, "swept:        %s (staging leftovers)\n", list(res.Swept))
	}
	printStrays(w, store.Dir(), res.Strays)
	return nil
}

// printStrays prints the strays of manifest directory dir, each with what
// kubelet does with it (manifest.StrayNote).
func printStrays(w io.Writer, dir string, strays []string) {
	if len(strays) == 0 {
		fmt.Fprintln(w, "strays:       none")
		return
	}
	fmt.Fprintf(w, "strays:       %s\n", list(strays))
	runs := false
	for _, s := range strays {
		note := manifest.StrayNote(dir, s)
		runs = runs || strings.HasPrefix(note, "kubelet runs") || strings.HasPrefix(note, "a symbolic link:")
		fmt.Fprintf(w, "              %s: %s\n", s, note)
	}
	if runs {
		fmt.Fprintln(w, "              not stratum manifests, left alone: remove those that should not run")
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// missingDirs is the directories MkdirAll(dir) would create, deepest
// first.
func missingDirs(dir string) []string {
	var out []string
	for p := filepath.Clean(dir); p != filepath.Dir(p); p = filepath.Dir(p) {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		out = append(out, p)
	}
	return out
}

// removeEmpty removes dirs, deepest first, each only while it is empty.
func removeEmpty(dirs []string) {
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil {
			return
		}
	}
}
