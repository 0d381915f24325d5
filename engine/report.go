package engine

// What a failed rollback leaves for the operator.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/snapshot"
)

// ComponentReport is one component's state, journaled when a rollback fails.
type ComponentReport struct {
	Component string `json:"component"`
	// Manifest is "snapshot" (the snapshot's bytes but for restarted-at),
	// "missing", "symlink" (a symbolic link, which is never followed),
	// "unreadable" or "other".
	Manifest  string         `json:"manifest"`
	Processes []proc.Process `json:"processes"`
	Active    bool           `json:"active"`
	Error     string         `json:"error,omitempty"`
}

// nodeReport is every component's exact state, for the operator.
func (e *Engine) nodeReport(r *run) []byte {
	snap, _ := snapshot.Load(r.txn.SnapshotDir, manifest.DerivedPaths(r.from))
	var out []ComponentReport
	for _, comp := range manifest.Names {
		rep := ComponentReport{Component: comp}
		b, err := e.store.Read(comp)
		switch {
		case errors.Is(err, manifest.ErrNoManifest):
			rep.Manifest = "missing"
		case errors.Is(err, durable.ErrSymlink):
			rep.Manifest, rep.Error = "symlink", err.Error()
		case err != nil:
			rep.Manifest, rep.Error = "unreadable", err.Error()
		case snap != nil && sameModuloStamp(snap, comp, b):
			rep.Manifest = "snapshot"
		default:
			rep.Manifest = "other"
		}
		st := r.from
		if !slices.Contains(manifest.NamesFor(st), comp) {
			st = r.to
		}
		if t, err := manifest.Target(st, comp); err == nil {
			rep.Processes, _ = e.procs.Of(t)
			rep.Active = e.procs.Active(context.Background(), t)
		}
		if rep.Manifest == "missing" && len(rep.Processes) == 0 && !slices.Contains(manifest.NamesFor(r.from), comp) {
			continue
		}
		out = append(out, rep)
	}
	b, _ := json.Marshal(out)
	return b
}

// sameModuloStamp reports whether b is the snapshot's manifest of comp but
// for the restarted-at annotation a rollback bumps.
func sameModuloStamp(snap *snapshot.Loaded, comp string, b []byte) bool {
	want, ok := snap.Manifest(comp)
	if !ok {
		return false
	}
	got, err := manifest.SetRestartedAt(b, "")
	if err != nil {
		return false
	}
	exp, err := manifest.SetRestartedAt(want, "")
	if err != nil {
		return false
	}
	return string(got) == string(exp)
}
