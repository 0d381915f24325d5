package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/manifest"
)

func newAuditCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "audit [COMPONENT]",
		Short: "Show the container spec kubelet was handed: argv and environment, read from the manifest file",
		Long: `audit reads the manifest FILE of COMPONENT (or of every component of the roster,
or every manifest present when the journal cannot be read) and prints the
container's argv and declared environment: what kubelet was handed, out-of-band
edits included, not what stratum would render. The image's own ENV layer is not
visible in a manifest.

A manifest that is missing or cannot be read is shown as such and makes audit
exit 1 after printing the others: the audit is incomplete, and a script must
not read it as a clean one. So does a manifest directory with no manifest at
all.`,
		Args: cobra.MaximumNArgs(1),
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			return g.audit(args)
		}),
	}
}

// auditEntry is one component in audit's output. Manifest is present,
// missing or unreadable; Argv and Env are null unless present; Error says
// why a manifest is missing or unreadable.
type auditEntry struct {
	Component string `json:"component"`
	Path      string `json:"path"`
	Manifest  string `json:"manifest"`
	// Argv is the container's command followed by its args, literal
	// (kubelet's $(VAR) expansion is not applied).
	Argv  []string          `json:"argv"`
	Env   map[string]string `json:"env"`
	Error *string           `json:"error"`
}

// auditReport is audit's output (docs/schemas/audit.json).
type auditReport struct {
	ManifestDir string `json:"manifestDir"`
	// Roster says where the list of components came from: "argument" (the
	// one named), "journal" (the node state's roster) or "manifest-dir"
	// (every manifest present: the journal is absent or unreadable).
	Roster     string       `json:"roster"`
	Components []auditEntry `json:"components"`
}

// errAuditIncomplete: a manifest audit was to show is missing or
// unreadable.
var errAuditIncomplete = errors.New("audit incomplete")

func (g *globals) audit(args []string) error {
	store, err := manifest.OpenReadOnly(g.manifestDir, g.storeOptions())
	if err != nil {
		return fmt.Errorf("audit: %w; nothing was audited (is --manifest-dir kubelet's staticPodPath?)", err)
	}
	rep := auditReport{ManifestDir: store.Dir(), Components: []auditEntry{}}
	var names []string
	if len(args) == 1 {
		if !manifest.IsName(args[0]) {
			return usagef("audit: unknown component %q (known: %s)", args[0], strings.Join(manifest.Names, ", "))
		}
		names, rep.Roster = args, "argument"
	} else {
		names, rep.Roster = g.auditRoster(store)
	}
	var missing, unreadable []string
	denied := false // a read failed for want of permission
	for _, name := range names {
		e := auditEntry{Component: name, Path: store.Path(name), Manifest: "present"}
		spec, err := store.ReadContainerSpec(name)
		switch {
		case errors.Is(err, manifest.ErrNoManifest):
			e.Manifest, e.Error = "missing", ptr("no manifest file: kubelet runs no "+name+" from this directory")
			missing = append(missing, name)
		case err != nil:
			e.Manifest, e.Error = "unreadable", ptr(err.Error())
			unreadable = append(unreadable, name)
			denied = denied || errors.Is(err, fs.ErrPermission)
		default:
			e.Argv, e.Env = nonNil(spec.Argv), spec.Env
			if e.Env == nil {
				e.Env = map[string]string{}
			}
		}
		rep.Components = append(rep.Components, e)
	}
	if g.json() {
		if err := g.write(rep); err != nil {
			return err
		}
	} else {
		rep.print(g)
	}
	return g.auditError(rep, missing, unreadable, denied)
}

// auditError is the error of an incomplete audit, nil for a complete one.
func (g *globals) auditError(rep auditReport, missing, unreadable []string, denied bool) error {
	var parts []string
	if len(rep.Components) == 0 {
		return fmt.Errorf("%w: no manifest of any component (%s) in %s, and no node state in the journal to say which should be there: nothing was audited (is --manifest-dir kubelet's staticPodPath?)",
			errAuditIncomplete, strings.Join(manifest.Names, ", "), rep.ManifestDir)
	}
	if len(missing) > 0 {
		parts = append(parts, "no manifest for "+strings.Join(missing, ", "))
	}
	for _, e := range rep.Components {
		if e.Manifest == "unreadable" {
			parts = append(parts, e.Component+" unreadable: "+*e.Error)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	adv := "`" + g.cmdline("status") + "` shows each component"
	if len(missing) > 0 && rep.Roster != "manifest-dir" {
		adv += "; `" + g.cmdline("render") + "` writes the missing manifests from the node state"
	}
	if denied {
		adv += "; audit reads the manifest files, which needs root (run it with sudo)"
	}
	return fmt.Errorf("%w: %s (%d of %d components audited); %s", errAuditIncomplete, strings.Join(parts, "; "),
		len(rep.Components)-len(missing)-len(unreadable), len(rep.Components), adv)
}

func (rep auditReport) print(g *globals) {
	w := g.stdout
	for i, e := range rep.Components {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s (%s)\n", e.Component, e.Path)
		if e.Manifest != "present" {
			fmt.Fprintf(w, "  %s: %s\n", strings.ToUpper(e.Manifest), *e.Error)
			continue
		}
		fmt.Fprintln(w, "  argv:")
		for _, a := range e.Argv {
			fmt.Fprintf(w, "    %s\n", a)
		}
		fmt.Fprintln(w, "  env:")
		if len(e.Env) == 0 {
			fmt.Fprintln(w, "    (none declared)")
		}
		for _, k := range slices.Sorted(maps.Keys(e.Env)) {
			fmt.Fprintf(w, "    %s=%s\n", k, e.Env[k])
		}
	}
}

// auditRoster is the node's roster from the journal (read-only), with
// "journal"; without a readable node state, every component whose
// manifest is present or cannot be checked, with "manifest-dir".
func (g *globals) auditRoster(store *manifest.Store) ([]string, string) {
	if ok, _ := g.journalExists(); ok {
		if j, err := g.openJournal(true); err == nil {
			defer j.Close()
			if st, err := j.NodeState(); err == nil {
				return manifest.NamesFor(st), "journal"
			}
		} else {
			g.log.Warn("journal not readable; auditing every manifest present", "err", err)
		}
	}
	var names []string
	for _, n := range manifest.Names {
		// An error (no permission, a symlink) is reported by the read.
		if ok, err := store.Exists(n); err != nil || ok {
			names = append(names, n)
		}
	}
	return names, "manifest-dir"
}

func ptr[T any](v T) *T { return &v }
