package cli

// The version command: what this binary is, from -ldflags when the
// Makefile or a package build set it, else from the build info the Go
// toolchain stamps into every binary (go install, go build in a clone).

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/ciq/stratum-upgrade/journal"
)

// versionReport is version's output (docs/schemas/version.json).
type versionReport struct {
	Version       string  `json:"version"`
	Commit        *string `json:"commit"`
	CommitTime    *string `json:"commitTime"`
	Modified      bool    `json:"modified"`
	Go            string  `json:"go"`
	Platform      string  `json:"platform"`
	JournalSchema int     `json:"journalSchema"`
}

// buildVersion is the version report of a binary built with ldflags
// setting Version to set ("dev" when not) and with build info info (nil
// when the binary has none). The module version is "(devel)" for a build
// in a clone without a tag and v0.0.0-<time>-<commit> pseudo versions
// otherwise; the commit, its time and whether the tree was modified come
// from the VCS stamp, which go build adds in a git clone.
func buildVersion(set string, info *debug.BuildInfo) versionReport {
	v := versionReport{Version: set, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, JournalSchema: journal.CurrentSchemaVersion}
	if info == nil {
		return v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = optional(s.Value)
		case "vcs.time":
			v.CommitTime = optional(s.Value)
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if set == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v.Version = info.Main.Version
	}
	return v
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, its commit, the Go version and the journal schema version",
		Args:  cobra.NoArgs,
		RunE: ran(func(cmd *cobra.Command, args []string) error {
			info, _ := debug.ReadBuildInfo()
			v := buildVersion(Version, info)
			if g.json() {
				return g.write(v)
			}
			fmt.Fprintf(g.stdout, "stratum-upgrade %s\n", v.Version)
			if v.Commit != nil {
				mod := ""
				if v.Modified {
					mod = " (modified)"
				}
				when := ""
				if v.CommitTime != nil {
					when = " " + *v.CommitTime
				}
				fmt.Fprintf(g.stdout, "commit: %s%s%s\n", *v.Commit, when, mod)
			} else if v.Version == "dev" {
				fmt.Fprintln(g.stdout, "commit: unknown (built without -ldflags and without the VCS stamp go build adds in a git clone: a git worktree, -buildvcs=false or no .git; `make build` sets the version)")
			}
			fmt.Fprintf(g.stdout, "go: %s %s\njournal schema: %d\n", v.Go, v.Platform, v.JournalSchema)
			return nil
		}),
	}
}
