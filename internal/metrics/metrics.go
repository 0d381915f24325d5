// Package metrics writes the outcome of the last upgrade transaction as a
// Prometheus text-format file for node_exporter's textfile collector
// (--collector.textfile.directory): point --metrics-file at
// <that directory>/stratum-upgrade.prom.
//
// The file is replaced atomically and durably (durable.WriteFile:
// a hidden staging file in the same directory, fsynced, renamed over the
// target), so the collector reads either the previous file or the new one,
// never a partial one; the hidden staging name does not end in .prom, so
// the collector never reads it either.
package metrics

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

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

// Encode writes u in the Prometheus text exposition format (version 0.0.4),
// as encoded by expfmt: HELP and TYPE lines for every family, then its
// samples. It fails only for a Result outside Results or a write error.
func Encode(w io.Writer, u Upgrade) error {
	if !slices.Contains(Results, u.Result) {
		return fmt.Errorf("metrics: result %q is not one of %s", u.Result, strings.Join(Results, ", "))
	}
	var results []*dto.Metric
	for _, r := range Results {
		v := 0.0
		if r == u.Result {
			v = 1
		}
		results = append(results, gauge(v, "result", r))
	}
	// A series may appear only once; a step timed more than once (a resumed
	// transaction repeats it) keeps its last duration.
	last := map[[2]string]time.Duration{}
	for _, s := range u.Steps {
		last[[2]string{s.Phase, s.Component}] = s.Duration
	}
	var steps []*dto.Metric
	for _, k := range slices.SortedFunc(maps.Keys(last), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	}) {
		steps = append(steps, gauge(last[k].Seconds(), "component", k[1], "phase", k[0]))
	}
	fams := []*dto.MetricFamily{
		family("stratum_upgrade_last_duration_seconds", "How long the last stratum-upgrade run, resume or rollback drove its transaction.",
			gauge(u.Duration.Seconds())),
		family("stratum_upgrade_last_result", "Outcome of the last transaction: 1 for its result, 0 for the others.",
			results...),
		family("stratum_upgrade_last_timestamp_seconds", "Unix time at which the last transaction stopped being driven.",
			gauge(float64(u.Finished.Unix())+float64(u.Finished.Nanosecond())/1e9)),
		family("stratum_upgrade_last_info", "The last transaction: its id, kind and the command that drove it (always 1).",
			gauge(1, "command", u.Command, "kind", u.Kind, "txn", u.Txn)),
		family("stratum_upgrade_step_duration_seconds", "Duration of each component step of the last transaction, manifest write to the new process answering.",
			steps...),
	}
	// Encode into memory first: w gets the whole file or, on an error, nothing.
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if len(f.Metric) == 0 {
			// expfmt refuses a family without samples, but the file has
			// always carried the step family's HELP and TYPE lines even
			// when no step ran (scripts grep for them): write just those.
			// The help texts are constants with nothing to escape.
			fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", f.GetName(), f.GetHelp(), f.GetName())
			continue
		}
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// family is a gauge family.
func family(name, help string, ms ...*dto.Metric) *dto.MetricFamily {
	return &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum(), Metric: ms}
}

// gauge is one gauge sample with the label name/value pairs nameValues, in
// that order (the order they are written in).
func gauge(v float64, nameValues ...string) *dto.Metric {
	m := &dto.Metric{Gauge: &dto.Gauge{Value: proto.Float64(v)}}
	for i := 0; i+1 < len(nameValues); i += 2 {
		m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(nameValues[i]), Value: proto.String(nameValues[i+1])})
	}
	return m
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
