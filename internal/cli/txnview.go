package cli

import (
	"encoding/json"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// txnInfo is a transaction as status and history show it
// (docs/schemas/defs.json#/$defs/transaction). Every field is always in
// its JSON: null when unset or unknown, [] for an empty list.
type txnInfo struct {
	ID      string        `json:"id"`
	Kind    string        `json:"kind"`
	Phase   journal.Phase `json:"phase"`
	Started time.Time     `json:"started"`
	Updated time.Time     `json:"updated"`
	// Ended is null while the transaction is open.
	Ended    *time.Time `json:"ended"`
	Duration string     `json:"duration"`
	// From and To are the Kubernetes versions of the node state before and
	// after; null when the journal does not hold a parsable state.
	From *string `json:"from"`
	To   *string `json:"to"`
	// Planned is every component whose manifest the transaction was to
	// change, in roster order; Written the ones it wrote (or may have: the
	// engine journals a mark just before each write), the set a rollback
	// restarts. A committed transaction wrote every planned one; one that
	// failed at its first component wrote only that one.
	Planned     []string `json:"planned"`
	Written     []string `json:"written"`
	SnapshotDir *string  `json:"snapshotDir"`
	EtcdBackup  bool     `json:"etcdBackup"`
	// Reason says why the transaction rolled back or failed.
	Reason *string `json:"reason"`
	// IgnoredChecks are the failed pre-flight checks the transaction was
	// let through with (--ignore-preflight-errors).
	IgnoredChecks []checkJSON `json:"ignoredChecks"`
}

// txnView is t as status and history show it, with the components it
// wrote read from its records.
func txnView(j *journal.Journal, t *journal.Txn) (txnInfo, error) {
	recs, err := j.Records(t.ID)
	if err != nil {
		return txnInfo{}, err
	}
	return txnSummary(t, recs), nil
}

// txnSummary is t as status and history show it; recs are its records.
func txnSummary(t *journal.Txn, recs []journal.Record) txnInfo {
	info := txnInfo{
		ID: t.ID, Kind: t.Kind, Phase: t.Phase, Started: t.Started, Updated: t.Updated,
		Planned: nonNil(t.Changed), Written: written(t, recs), EtcdBackup: len(t.EtcdBackup) > 0,
		SnapshotDir: optional(t.SnapshotDir), Reason: optional(t.Reason), IgnoredChecks: []checkJSON{},
	}
	for _, c := range t.IgnoredChecks {
		info.IgnoredChecks = append(info.IgnoredChecks, checkJSON{Check: c.Check, Component: optional(c.Component), Message: c.Message})
	}
	if t.Ended.IsZero() {
		info.Duration = "open " + time.Since(t.Started).Round(time.Second).String()
	} else {
		info.Ended = ptr(t.Ended)
		info.Duration = t.Ended.Sub(t.Started).Round(time.Millisecond).String()
	}
	if st, err := nodestate.Parse(t.From); err == nil {
		info.From = ptr(st.KubernetesVersion)
	}
	if st, err := nodestate.Parse(t.To); err == nil {
		info.To = ptr(st.KubernetesVersion)
	}
	return info
}

// written is the planned components of t that its records show a
// manifest write for, in roster order: the engine's rule (a mark record
// in phase applying is journaled just before each write; engine/rollback.go).
func written(t *journal.Txn, recs []journal.Record) []string {
	out := []string{}
	for _, comp := range t.Changed {
		for _, r := range recs {
			if r.Phase == journal.PhaseApplying && r.Step == journal.StepMark && r.Component == comp {
				out = append(out, comp)
				break
			}
		}
	}
	return out
}

// optional is s, or nil (JSON null) when s is empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// orDash is s, or "-" for a text column when s is nil or empty.
func orDash[S string | *string](s S) string {
	switch v := any(s).(type) {
	case *string:
		if v != nil && *v != "" {
			return *v
		}
	case string:
		if v != "" {
			return v
		}
	}
	return "-"
}

// etcdBackupJSON is the etcd data snapshot a transaction took, as history
// TXN shows it.
type etcdBackupJSON struct {
	Path     string    `json:"path"`
	SHA256   string    `json:"sha256"`
	Size     int64     `json:"size"`
	Revision int64     `json:"revision"`
	Version  string    `json:"version"`
	Members  int       `json:"members"`
	Taken    time.Time `json:"taken"`
}

// etcdBackupOf decodes the journal's opaque etcd backup; nil when there is
// none or it does not decode.
func etcdBackupOf(raw []byte) *etcdBackupJSON {
	var b etcddata.Backup
	if len(raw) == 0 || json.Unmarshal(raw, &b) != nil {
		return nil
	}
	return &etcdBackupJSON{Path: b.Path, SHA256: b.SHA256, Size: b.Size, Revision: b.Revision, Version: b.Version, Members: b.Members, Taken: b.Taken}
}

// componentReportJSON is one component's state journaled when a rollback
// failed.
type componentReportJSON struct {
	Component string        `json:"component"`
	Manifest  string        `json:"manifest"`
	Processes []processJSON `json:"processes"`
	Active    bool          `json:"active"`
	Error     *string       `json:"error"`
}

// rollbackReportOf decodes a failed rollback's per-component report (the
// journal's opaque detail); nil when there is none or it does not decode.
func rollbackReportOf(raw []byte) []componentReportJSON {
	var reps []engine.ComponentReport
	if len(raw) == 0 || json.Unmarshal(raw, &reps) != nil || reps == nil {
		return nil
	}
	out := make([]componentReportJSON, len(reps))
	for i, r := range reps {
		out[i] = componentReportJSON{Component: r.Component, Manifest: r.Manifest, Processes: processesJSON(r.Processes), Active: r.Active, Error: optional(r.Error)}
	}
	return out
}
