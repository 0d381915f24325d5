package metrics

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

func sample() Upgrade {
	return Upgrade{
		Command:  "run",
		Txn:      "20261202T130405Z-1a2b",
		Kind:     "upgrade",
		Result:   "rolled-back",
		Duration: 12500 * time.Millisecond,
		Finished: time.Unix(1764680645, 250_000_000),
		Steps: []Step{
			{Component: "kube-scheduler", Phase: "applying", Duration: 11 * time.Second},
			{Component: "etcd", Phase: "applying", Duration: 14 * time.Second},
			{Component: "kube-scheduler", Phase: "rolling-back", Duration: time.Second},
			// A resumed step timed again: the last attempt wins.
			{Component: "kube-scheduler", Phase: "applying", Duration: 12 * time.Second},
		},
	}
}

func parse(t *testing.T, b []byte) map[string]*dto.MetricFamily {
	t.Helper()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Prometheus text parser rejects the file: %v\n%s", err, b)
	}
	return fams
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestEncodeParsesBack parses the file with Prometheus' own text parser and
// checks every family's type, help and samples.
func TestEncodeParsesBack(t *testing.T) {
	var b bytes.Buffer
	if err := Encode(&b, sample()); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b.Bytes())
	for name, f := range fams {
		if f.GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s: type %v, want gauge", name, f.GetType())
		}
		if f.GetHelp() == "" {
			t.Errorf("%s: no HELP", name)
		}
	}
	gauge := func(name string) float64 {
		t.Helper()
		f := fams[name]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("%s: want one sample, got %v", name, f)
		}
		return f.Metric[0].GetGauge().GetValue()
	}
	if v := gauge("stratum_upgrade_last_duration_seconds"); v != 12.5 {
		t.Errorf("duration %v, want 12.5", v)
	}
	if v := gauge("stratum_upgrade_last_timestamp_seconds"); v != 1764680645.25 {
		t.Errorf("timestamp %v, want 1764680645.25", v)
	}
	info := fams["stratum_upgrade_last_info"].Metric[0]
	if l := labels(info); l["txn"] != "20261202T130405Z-1a2b" || l["command"] != "run" || l["kind"] != "upgrade" {
		t.Errorf("info labels %v", l)
	}

	res := map[string]float64{}
	for _, m := range fams["stratum_upgrade_last_result"].Metric {
		res[labels(m)["result"]] = m.GetGauge().GetValue()
	}
	if len(res) != len(Results) {
		t.Errorf("results %v, want one series per %v", res, Results)
	}
	for _, r := range Results {
		want := 0.0
		if r == "rolled-back" {
			want = 1
		}
		if res[r] != want {
			t.Errorf("result %s = %v, want %v", r, res[r], want)
		}
	}

	steps := map[string]float64{}
	for _, m := range fams["stratum_upgrade_step_duration_seconds"].Metric {
		l := labels(m)
		steps[l["phase"]+"/"+l["component"]] = m.GetGauge().GetValue()
	}
	want := map[string]float64{"applying/etcd": 14, "applying/kube-scheduler": 12, "rolling-back/kube-scheduler": 1}
	if len(steps) != len(want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	for k, v := range want {
		if steps[k] != v {
			t.Errorf("step %s = %v, want %v", k, steps[k], v)
		}
	}
}

// TestEncodeLineShape checks the file line by line without a parser: every
// line is a comment (HELP or TYPE) or "name{labels} value", and every
// family's HELP and TYPE come before its samples.
func TestEncodeLineShape(t *testing.T) {
	var b bytes.Buffer
	if err := Encode(&b, sample()); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\n") {
		t.Fatal("file does not end in a newline")
	}
	typed := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 || f[3] != "gauge" {
				t.Errorf("line %d: %q", i+1, line)
			}
			typed[f[2]] = true
		default:
			name := line[:strings.IndexAny(line, "{ ")]
			if !typed[name] {
				t.Errorf("line %d: sample of %s before its TYPE line", i+1, name)
			}
			if f := strings.Fields(line[strings.LastIndexByte(line, ' '):]); len(f) != 1 {
				t.Errorf("line %d: %q has no single value", i+1, line)
			}
		}
	}
}

func TestLabelEscaping(t *testing.T) {
	u := sample()
	u.Txn = "a\"b\\c\nd"
	var b bytes.Buffer
	if err := Encode(&b, u); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b.Bytes())
	if got := labels(fams["stratum_upgrade_last_info"].Metric[0])["txn"]; got != u.Txn {
		t.Errorf("txn label parsed back as %q, want %q", got, u.Txn)
	}
}

func TestEncodeRefusesUnknownResult(t *testing.T) {
	u := sample()
	u.Result = "maybe"
	if err := Encode(&bytes.Buffer{}, u); err == nil {
		t.Fatal("Encode accepted an unknown result")
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stratum-upgrade.prom")
	if err := WriteFile(path, sample()); err != nil {
		t.Fatal(err)
	}
	u := sample()
	u.Result = "committed"
	if err := WriteFile(path, u); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `stratum_upgrade_last_result{result="committed"} 1`) {
		t.Errorf("rewritten file:\n%s", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the metrics file (no staging leftover)", len(entries))
	}
	// An unwritable target leaves nothing and says so.
	if err := WriteFile(filepath.Join(dir, "stratum-upgrade.prom", "x"), sample()); err == nil {
		t.Error("WriteFile under a regular file succeeded")
	}
}

// With no step the step family still has its HELP and TYPE lines (expfmt
// would refuse the empty family) and the file still parses.
func TestEncodeNoSteps(t *testing.T) {
	u := sample()
	u.Steps = nil
	var b bytes.Buffer
	if err := Encode(&b, u); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "# TYPE stratum_upgrade_step_duration_seconds gauge\n") {
		t.Errorf("file does not end with the step family's TYPE line:\n%s", b.String())
	}
	fams := parse(t, b.Bytes())
	if f := fams["stratum_upgrade_step_duration_seconds"]; f != nil && len(f.Metric) != 0 {
		t.Errorf("step samples without steps: %v", f)
	}
}
