package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// loadRelease reads and validates the release file; every failure is bad
// usage (the file is the user's input).
func loadRelease(path string) (*engine.Release, []byte, error) {
	if path == "" {
		return nil, nil, cmdLineErrorf("--to RELEASE is required: the Kubernetes version (v1.36.3) or the release file to upgrade to")
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && looksLikeVersion.MatchString(path) {
		// A mistake in the command line: Main points at --help.
		return nil, nil, cmdLineErrorf("--to %s: not a Kubernetes version (v and major.minor.patch, like v1.36.3), and no release file of that name; plan without --to lists the versions this node can go to", path)
	}
	rel, raw, err := engine.LoadRelease(path)
	var ke *nodestate.KindError
	if errors.As(err, &ke) {
		return nil, nil, usagef("%w; --to takes a release (kind: %s)", err, engine.ReleaseKind)
	}
	if err != nil {
		return nil, nil, usage(err)
	}
	return rel, raw, nil
}

// applyRelease checks that rel applies to st (the result validates): a
// release that cannot is bad input, told apart here from the engine's
// run-time failures.
func applyRelease(rel *engine.Release, st *nodestate.NodeState, path string) error {
	if _, err := rel.Apply(st); err != nil {
		return usagef("release %s: %w", path, err)
	}
	return nil
}

// preflightFlag adds --ignore-preflight-errors to cmd.
func preflightFlag(cmd *cobra.Command, ignore *[]string) {
	cmd.Flags().StringSliceVar(ignore, "ignore-preflight-errors", nil,
		"pre-flight checks whose failure is only a warning, comma-separated (e.g. EtcdHealth,ComponentSkew), or all; the checks: "+strings.Join(engine.PreflightChecks(), ", "))
}

// upgradeOptions validates the --ignore-preflight-errors names: an unknown
// one is bad usage.
func upgradeOptions(ignore []string) (engine.UpgradeOptions, error) {
	if err := engine.CheckIgnore(ignore); err != nil {
		return engine.UpgradeOptions{}, usagef("--ignore-preflight-errors: %w", err)
	}
	return engine.UpgradeOptions{IgnorePreflight: ignore}, nil
}

// warnIgnored prints each failed pre-flight check that was let through as
// a warning on stderr.
func (g *globals) warnIgnored(fs []versions.Finding) {
	for _, f := range fs {
		fmt.Fprintf(g.stderr, "stratum-upgrade: warning: [WARNING %s] %s (ignored: --ignore-preflight-errors)\n", f.Check, f.Message)
	}
}

// preflightRefused prints the ignored checks of a pre-flight refusal as
// warnings; the refusal itself is the error.
func (g *globals) preflightRefused(err error) {
	var pe *engine.PreflightError
	if errors.As(err, &pe) {
		g.warnIgnored(pe.Ignored)
	}
}

func newPlanCmd(g *globals) *cobra.Command {
	var to, state string
	var ignore []string
	var twoStep bool
	cmd := &cobra.Command{
		Use:   "plan [--to VERSION|RELEASE | --state FILE]",
		Short: "Show the upgrades available, or the unified diff of every manifest an upgrade (or a new node state) would change; nothing is written",
		Long: `plan computes what 'run --to VERSION|RELEASE' (or 'apply --state FILE') would
do against the persisted node state and the manifests on disk, and prints a
unified diff of each manifest that would change, in roster order. It writes
nothing: not the journal (opened read-only), not the manifest directory. A
release or state that changes nothing prints "nothing to do" and exits 0. It is
refused while a transaction is open.

--to takes a Kubernetes version or a release file. A version (v1.36.3) moves
kube-apiserver, kube-controller-manager and kube-scheduler to it (a pinned image
keeps its repository, an unpinned one comes from the node's imageRepository)
and etcd to the version kubeadm pairs with its minor (docs/versions.md), never
down. A release file pins the images it names. A target whose kubernetesVersion
is not kube-apiserver's version is refused (exit 1), naming both.

With neither --to nor --state, plan prints the upgrades available, as 'kubeadm
upgrade plan' does: for the newest patch of the node's minor and for the next
minor the version table knows, each component's CURRENT and TARGET version and
the command to run.

Before the diff, plan runs the pre-flight checks run would run (upgrade paths,
version skew, etcd's health when etcd changes; docs/cli.md): a failed check
refuses the release (exit 1) and says which release would be valid.
--ignore-preflight-errors=NAME,... (or all) turns a failure into a warning.
--two-step plans a minor move as run --two-step takes it (the binary step).`,
		Args: cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			opts, err := upgradeOptions(ignore)
			if err != nil {
				return err
			}
			opts.TwoStep = twoStep
			// An empty --to or --state ("--to=$REL" with REL unset) is a
			// mistake, not a request for the upgrades available.
			for _, f := range []string{"to", "state"} {
				if cmd.Flags().Changed(f) && cmd.Flags().Lookup(f).Value.String() == "" {
					return cmdLineErrorf("plan: --%s is empty: give it a value, or leave --to and --state out to list the upgrades available", f)
				}
			}
			switch {
			case to != "" && state != "":
				return cmdLineErrorf("plan: --to and --state are exclusive: plan an upgrade to a release, or a new node state")
			case state != "":
				return g.runPlanState(state, opts)
			case to == "":
				return g.runAvailable()
			case byVersion(to):
				return g.runPlanVersion(to, opts)
			}
			return g.runPlan(to, opts)
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", toFlagHelp)
	cmd.Flags().StringVar(&state, "state", "", "node state file (YAML, kind NodeState) to plan instead of a release")
	cmd.Flags().BoolVar(&twoStep, "two-step", false, "with --to: plan a minor move's binary step, as run --two-step takes it")
	preflightFlag(cmd, &ignore)
	g.criFlags(cmd, false, false)
	return cmd
}

// planReport is plan's JSON output.
type planReport struct {
	From       string `json:"from"`
	To         string `json:"to"`
	Nothing    bool   `json:"nothingToDo,omitempty"`
	Message    string `json:"message,omitempty"`
	EtcdBackup bool   `json:"etcdBackup"`
	// EtcdSnapshot says why the transaction forces an etcd snapshot
	// first ("" when it does not).
	EtcdSnapshot string `json:"etcdSnapshot"`
	// IgnoredChecks are the failed pre-flight checks let through;
	// FailedChecks those that refuse it (the diff is shown all the same).
	IgnoredChecks []versions.Finding `json:"ignoredChecks,omitempty"`
	FailedChecks  []versions.Finding `json:"failedChecks,omitempty"`
	Changes       []planChange       `json:"changes"`
	// Images is every image the transaction needs, as the container
	// runtime has it; absent when no runtime answers.
	Images []planImage `json:"images,omitempty"`
}

type planChange struct {
	Component string `json:"component"`
	Path      string `json:"path"`
	New       bool   `json:"new,omitempty"`
	// EditedByHand: the manifest on disk is not the render of the node
	// state (status shows "differs"); the upgrade puts the render back.
	EditedByHand bool `json:"editedByHand"`
	// InputsChanged: a file the component reads only at start changed
	// since its manifest was written (manifest.InputsAnnotation).
	InputsChanged bool `json:"inputsChanged"`
	// Replacement is "surge" or "stop-then-start" for a component that
	// can surge at all (engine.Plan.Replacements), with the reason it
	// will not; empty for the others.
	Replacement    string `json:"replacement,omitempty"`
	ReplacementWhy string `json:"replacementWhy,omitempty"`
	Diff           string `json:"diff"`
}

// planHeader is the text plan prints above the diffs: what the upgrade
// changes, and which manifests were edited by hand (they differ from the
// render of the node state, as status's "differs") and are put back.
// stateFile names the node state file of a plan --state, "" for a release.
func planHeader(plan *engine.Plan, stateFile string) []string {
	from, to := plan.From.KubernetesVersion, plan.To.KubernetesVersion
	released, edited := plan.Released(), plan.EditedByHand()
	what, already, writer := fmt.Sprintf("upgrade %s -> %s", from, to), "the node already runs this release", "the upgrade"
	if stateFile != "" {
		what, already, writer = "node state "+stateFile, "it renders as the persisted node state does", "the transaction"
	}
	var out []string
	if len(released) == 0 {
		out = append(out, fmt.Sprintf("%s changes no component's render: %s", what, already))
	} else {
		out = append(out, fmt.Sprintf("%s changes %d manifest(s): %s", what, len(released), list(released)))
	}
	for _, comp := range plan.InputsChanged() {
		line := fmt.Sprintf("start-only inputs changed: %s reads its files only at start; the write restarts it on them as they are now", comp)
		if paths, err := manifest.InputPaths(plan.From, comp); err == nil {
			line = fmt.Sprintf("start-only inputs changed: %s reads %s only at start; the write restarts it on the files as they are now", comp, strings.Join(paths, ", "))
		}
		out = append(out, line)
	}
	if len(edited) > 0 {
		out = append(out, fmt.Sprintf("edited by hand: %s (not the render of the node state: status shows \"differs\"); %s writes the render back, undoing the edits the diffs below show", list(edited), writer))
	}
	return append(append(out, replacementLines(plan)...), twoStepLines(plan)...)
}

// twoStepLines says where the plan leaves a two-step minor upgrade: its
// binary step taken, its finishing step, or still waiting for it.
func twoStepLines(plan *engine.Plan) []string {
	was, before := versions.PendingTwoStep(resolve.Resolve(plan.From))
	will, after := versions.PendingTwoStep(resolve.Resolve(plan.To))
	switch {
	case after && !before:
		return []string{fmt.Sprintf("two-step: the binary step: %s binaries emulating %s; rollback --last of it goes back to the %s binaries, `finish` takes the finishing step", will.Binary, will.Emulated, will.Emulated)}
	case before && !after:
		return []string{fmt.Sprintf("two-step: the finishing step: the %s binaries stop emulating %s; rollback --last of it lowers the emulated version again, and going back to the %s binaries is refused from then on (EmulationFinished)", was.Binary, was.Emulated, was.Emulated)}
	case after:
		return []string{fmt.Sprintf("two-step: %s binaries still emulating %s: `finish` takes the finishing step", will.Binary, will.Emulated)}
	}
	return nil
}

// replacementLines says which changed components will surge (a new
// instance beside the running one) and why each other that could will not.
func replacementLines(plan *engine.Plan) []string {
	var surges, out []string
	for _, comp := range plan.Changed() {
		r, ok := plan.Replacements[comp]
		switch {
		case !ok:
		case r.Surge:
			surges = append(surges, comp)
		default:
			out = append(out, fmt.Sprintf("stop-then-start: %s: %s", comp, r.Why))
		}
	}
	if len(surges) > 0 {
		out = append([]string{fmt.Sprintf("surge: %s start beside the running instance, no gap (--no-surge: stop-then-start)", list(surges))}, out...)
	}
	return out
}

func (g *globals) runPlan(to string, opts engine.UpgradeOptions) error {
	rel, _, err := loadRelease(to)
	if err != nil {
		return err
	}
	return g.showPlan(planInput{label: "release " + rel.KubernetesVersion, version: rel.KubernetesVersion, opts: &opts,
		plan: func(store *manifest.Store, st *nodestate.NodeState) (*engine.Plan, error) {
			if err := applyRelease(rel, st, to); err != nil {
				return nil, err
			}
			return engine.PlanUpgrade(context.Background(), store, g.scanner, st, rel, opts)
		}})
}

func (g *globals) runPlanVersion(to string, opts engine.UpgradeOptions) error {
	return g.showPlan(planInput{label: "version " + to, version: to, opts: &opts,
		plan: func(store *manifest.Store, st *nodestate.NodeState) (*engine.Plan, error) {
			rel, _, err := releaseForVersion(st, to)
			if err != nil {
				return nil, err
			}
			if err := applyRelease(rel, st, to); err != nil {
				return nil, err
			}
			return engine.PlanUpgrade(context.Background(), store, g.scanner, st, rel, opts)
		}})
}

func (g *globals) runPlanState(path string, opts engine.UpgradeOptions) error {
	to, err := loadStateFile(path)
	if err != nil {
		return err
	}
	return g.showPlan(planInput{label: "node state " + path, version: to.KubernetesVersion, stateFile: path, opts: &opts,
		plan: func(store *manifest.Store, st *nodestate.NodeState) (*engine.Plan, error) {
			return engine.PlanState(context.Background(), store, g.scanner, st, to, opts)
		}})
}

// planInput is what plan shows: a release's upgrade or a node state's
// change, computed by plan from the persisted node state.
type planInput struct {
	// label names the target in the diffs: "release v1.37.2".
	label, version string
	// stateFile is the node state file of plan --state; "" for a release.
	stateFile string
	plan      func(*manifest.Store, *nodestate.NodeState) (*engine.Plan, error)
	// opts are the options plan calls the engine with (planRefused).
	opts *engine.UpgradeOptions
}

func (g *globals) showPlan(in planInput) error {
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
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		return err
	}
	if in.opts != nil {
		in.opts.Kubelet = g.planKubelet(st)
		// What the journal says the node ran: EmulationFinished.
		*in.opts = in.opts.WithJournal(j)
	}
	plan, err := in.plan(store, st)
	refused := g.planRefused(in, store, st, &plan, &err)
	if errors.Is(err, engine.ErrNothingToDo) {
		if g.json() {
			return g.write(planReport{From: st.KubernetesVersion, To: in.version, Nothing: true, Message: err.Error(), Changes: []planChange{}})
		}
		fmt.Fprintln(g.stdout, err)
		return nil
	}
	if err != nil {
		g.preflightRefused(err)
		return err
	}
	g.warnIgnored(plan.Ignored)
	imgs, err := g.planImages(plan)
	if err != nil {
		return err
	}
	rep := planReport{From: plan.From.KubernetesVersion, To: plan.To.KubernetesVersion, IgnoredChecks: plan.Ignored, FailedChecks: refused.failed(), Changes: []planChange{}, Images: imgs}
	for _, c := range plan.Changes {
		path := store.Path(c.Component)
		from := path + "\t(on disk)"
		if c.Before == nil {
			from = "/dev/null"
		}
		// Unified diff with 3 lines of context, as diff -u: "--- from",
		// "+++ to", hunks; a new manifest diffs from /dev/null.
		d := udiff.Unified(from, path+"\t("+in.label+")", string(c.Before), string(c.After))
		pc := planChange{Component: c.Component, Path: path, New: c.Before == nil, EditedByHand: c.EditedByHand, InputsChanged: c.InputsChanged, Diff: d}
		if r, ok := plan.Replacements[c.Component]; ok {
			pc.Replacement, pc.ReplacementWhy = "stop-then-start", r.Why
			if r.Surge {
				pc.Replacement, pc.ReplacementWhy = "surge", ""
			}
		}
		rep.Changes = append(rep.Changes, pc)
		rep.EtcdBackup = rep.EtcdBackup || c.Component == nodestate.Etcd
	}
	rep.EtcdSnapshot = plan.EtcdSnapshotForced()
	if g.json() {
		if err := g.write(rep); err != nil {
			return err
		}
		return refused.err()
	}
	w := g.stdout
	refused.print(w)
	for _, l := range planHeader(plan, in.stateFile) {
		fmt.Fprintln(w, l)
	}
	if rep.EtcdBackup {
		verb := "run"
		if in.stateFile != "" {
			verb = "apply"
		}
		fmt.Fprintf(w, "etcd's manifest changes: %s takes a snapshot of etcd's data first (within --etcd-backup-timeout %s)\n", verb, g.dl.EtcdBackup)
	}
	if rep.EtcdSnapshot != "" {
		fmt.Fprintln(w, rep.EtcdSnapshot)
	}
	for _, l := range planImageLines(imgs) {
		fmt.Fprintln(w, l)
	}
	for _, c := range rep.Changes {
		fmt.Fprintln(w)
		fmt.Fprint(w, c.Diff)
	}
	return refused.err()
}
