// Package metrics writes the outcome of the last upgrade transaction as a
// Prometheus text-format file for node_exporter's textfile collector
// (--collector.textfile.directory): point --metrics-file at
// <that directory>/stratum-upgrade.prom.
//
// The file is replaced atomically and durably (internal/durable.WriteFile:
// a hidden staging file in the same directory, fsynced, renamed over the
// target), so the collector reads either the previous file or the new one,
// never a partial one; the hidden staging name does not end in .prom, so
// the collector never reads it either.
package metrics

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
)

// Results are the values of the result label, in the order they are
// written. Exactly one of them is 1 in a written file.
var Results = []string{"committed", "rolled-back", "rollback-failed", "interrupted", "error"}

// Step is the duration of one component's step (manifest write to the new
// process answering) in one phase of the transaction.
type Step struct {
	Component string
	Phase     string
	Duration  time.Duration
}

// Upgrade is what one run, resume or rollback did.
type Upgrade struct {
	// Command is the stratum-upgrade command: run, resume or rollback.
	Command string
	// Txn is the transaction id; Kind is upgrade or rollback-last.
	Txn, Kind string
	// Result is one of Results.
	Result string
	// Duration is how long the command drove the transaction.
	Duration time.Duration
	// Finished is when it stopped.
	Finished time.Time
	Steps    []Step
}

// Encode writes u in the Prometheus text exposition format (version 0.0.4):
// HELP and TYPE lines for every family, then its samples. It fails only
// for a Result outside Results or a write error.
func Encode(w io.Writer, u Upgrade) error {
	known := false
	for _, r := range Results {
		known = known || r == u.Result
	}
	if !known {
		return fmt.Errorf("metrics: result %q is not one of %s", u.Result, strings.Join(Results, ", "))
	}
	var b bytes.Buffer
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("stratum_upgrade_last_duration_seconds", "gauge", "How long the last stratum-upgrade run, resume or rollback drove its transaction.")
	fmt.Fprintf(&b, "stratum_upgrade_last_duration_seconds %s\n", float(u.Duration.Seconds()))

	family("stratum_upgrade_last_result", "gauge", "Outcome of the last transaction: 1 for its result, 0 for the others.")
	for _, r := range Results {
		v := 0
		if r == u.Result {
			v = 1
		}
		fmt.Fprintf(&b, "stratum_upgrade_last_result{result=%s} %d\n", quote(r), v)
	}

	family("stratum_upgrade_last_timestamp_seconds", "gauge", "Unix time at which the last transaction stopped being driven.")
	fmt.Fprintf(&b, "stratum_upgrade_last_timestamp_seconds %s\n", unixSeconds(u.Finished))

	family("stratum_upgrade_last_info", "gauge", "The last transaction: its id, kind and the command that drove it (always 1).")
	fmt.Fprintf(&b, "stratum_upgrade_last_info{command=%s,kind=%s,txn=%s} 1\n", quote(u.Command), quote(u.Kind), quote(u.Txn))

	family("stratum_upgrade_step_duration_seconds", "gauge", "Duration of each component step of the last transaction, manifest write to the new process answering.")
	// A series may appear only once; a step timed more than once (a resumed
	// transaction repeats it) keeps its last duration.
	last := map[[2]string]time.Duration{}
	var keys [][2]string
	for _, s := range u.Steps {
		key := [2]string{s.Phase, s.Component}
		if _, ok := last[key]; !ok {
			keys = append(keys, key)
		}
		last[key] = s.Duration
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "stratum_upgrade_step_duration_seconds{component=%s,phase=%s} %s\n", quote(k[1]), quote(k[0]), float(last[k].Seconds()))
	}
	_, err := w.Write(b.Bytes())
	return err
}

// WriteFile encodes u and replaces path with it, atomically and durably,
// mode 0644 (node_exporter may run as another user). On error path is
// unchanged.
func WriteFile(path string, u Upgrade) error {
	var b bytes.Buffer
	if err := Encode(&b, u); err != nil {
		return err
	}
	if _, err := durable.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("metrics file %s: %w", path, err)
	}
	return nil
}

// quote is a label value in the text format: double-quoted, with backslash,
// double quote and newline escaped.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// float formats a sample value the way Prometheus parses it back exactly.
func float(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// unixSeconds is t as decimal Unix seconds, exact to the nanosecond (a
// float64 division would round the last digits).
func unixSeconds(t time.Time) string {
	ns := t.UnixNano()
	sec, frac := ns/1e9, ns%1e9
	if frac < 0 {
		sec, frac = sec-1, frac+1e9
	}
	if frac == 0 {
		return strconv.FormatInt(sec, 10)
	}
	return strings.TrimRight(fmt.Sprintf("%d.%09d", sec, frac), "0")
}
