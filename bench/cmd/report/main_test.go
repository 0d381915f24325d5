package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/ciq/stratum-upgrade/bench
BenchmarkDetection-2   	       1	40293058295 ns/op	         4.673 healthy-record-max-ms	         1.529 healthy-record-p50-ms	         4.086 healthy-record-p99-ms	        14.48 listen-durable-max-ms	         5.638 listen-durable-p50-ms	        11.64 listen-durable-p99-ms	         9.865 listen-record-max-ms	         4.614 listen-record-p50-ms	         9.831 listen-record-p99-ms	       100.0 replacements	         4.247 wait-cpu-%	         5.123 wait-cpu-ms/step	       120.6 wait-ms/step
BenchmarkJournal-2   	       1	1219655316 ns/op	         1.000 commits/step	         2.010 fsyncs/step	         0.01000 grows/step	         0.1527 raw-fsync-ms	         1.505 step-ms	         9.856 step/raw
some log line the benchmarks printed
BenchmarkPIDsCrowded-2   	       1	15570281541 ns/op	       944.1 pgrep-ms	        20.39 pgrep-start-ms	       134.4 pids-ms	         0.1424 pids/pgrep	     10091 procs	      4501 spawn-ms
BenchmarkUpgrade-2     	       1	22308750447 ns/op	         0.7098 apply-cpu-%	         7.810 between-ms/step	         8.000 commits/upgrade	         3.416 detect-ms/step	      5158 engine-ms/upgrade	         1.009 engine/kubelet	      5113 kubelet-ms/upgrade	        11.23 overhead-ms/step	      5398 run-ms/upgrade	        16.00 steps	         4.000 upgrades	         1.4125 wait-cpu-%	        16.95 wait-cpu-ms/step	      1200 wait-ms/step	0.01 idle-cpu-%	120 machine-forks/s
PASS
`

func TestRows(t *testing.T) {
	res := Parse([]byte(sample))
	if len(res) != 4 || res["BenchmarkUpgrade"]["engine/kubelet"] != 1.009 {
		t.Fatalf("Parse: %v", res)
	}
	rows, err := Rows(res)
	if err != nil {
		t.Fatal(err)
	}
	met := map[string]bool{}
	for _, r := range rows {
		if r.Target != "" {
			met[r.Metric[:2]] = r.Met
		}
	}
	want := map[string]bool{"1a": true, "1b": true, "1c": true, "2.": false, "3.": true, "4.": true, "5.": true}
	for k, v := range want {
		if met[k] != v {
			t.Errorf("row %s met = %v, want %v", k, met[k], v)
		}
	}
	table := Table(rows)
	for _, s := range []string{"| metric", "p50 1.53, p99 4.09, max 4.67 ms", "1.41% of one core (16.9 ms CPU a step over 1200 ms;", "4.25% of one core (5.12 ms CPU a step over 121 ms)", "2.01 = 2.00 per step", "| 1.009 (5158 ms", "0.142 (134 ms / 944 ms, of which 20.4 ms starting pgrep)", "| no "} {
		if !strings.Contains(table, s) {
			t.Errorf("table does not show %q:\n%s", s, table)
		}
	}
}

// TestRowsCPUTargets: waiting at a 1 s kubelet delay (row 2) must cost at
// most 0.5% of a core; at a 100 ms delay (row 2b) the cost is reported
// with no target.
func TestRowsCPUTargets(t *testing.T) {
	for _, tc := range []struct {
		pct string
		met bool
	}{{"0.45", true}, {"0.5", true}, {"0.55", false}} {
		in := strings.Replace(sample, "1.4125 wait-cpu-%", tc.pct+" wait-cpu-%", 1)
		rows, err := Rows(Parse([]byte(in)))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			switch r.Metric[:2] {
			case "2.":
				if r.Target != "<= 0.5%" || r.Met != tc.met {
					t.Errorf("row 2 at %s%%: target %q, met %v; want <= 0.5%%, %v", tc.pct, r.Target, r.Met, tc.met)
				}
			case "2b":
				if r.Target != "" {
					t.Errorf("row 2b has target %q, want none", r.Target)
				}
			}
		}
	}
}

func TestRowsMissingMetric(t *testing.T) {
	_, err := Rows(Parse([]byte(strings.Replace(sample, "BenchmarkJournal-2", "BenchmarkOther-2", 1))))
	if err == nil || !strings.Contains(err.Error(), "BenchmarkJournal fsyncs/step") {
		t.Fatalf("Rows without the journal benchmark: %v", err)
	}
}

func TestSplice(t *testing.T) {
	block := GeneratedBlock("| t |\n", "- m\n")
	doc := "# Performance\n\nintro\n\n" + BeginMarker + "\nold table\n" + EndMarker + "\n\n## Definitions\n\ntext\n"
	got := Splice(doc, block)
	if strings.Contains(got, "old table") || !strings.Contains(got, "| t |") || !strings.HasSuffix(got, "## Definitions\n\ntext\n") || !strings.HasPrefix(got, "# Performance\n\nintro\n\n") {
		t.Fatalf("Splice replaced the wrong part:\n%s", got)
	}
	if again := Splice(got, block); again != got {
		t.Fatalf("Splice is not idempotent:\n%s\n---\n%s", got, again)
	}
	if got := Splice("", block); !strings.HasPrefix(got, "# Performance\n\n"+BeginMarker) {
		t.Fatalf("Splice into nothing: %q", got)
	}
	if got := Splice("hand-written\n", block); got != "hand-written\n\n"+block {
		t.Fatalf("Splice without markers: %q", got)
	}
}

func TestRunFromSavedOutput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "bench.out")
	doc := filepath.Join(dir, "performance.md")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte("# Performance\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(in, doc, "", &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1 target(s) missed") {
		t.Errorf("output does not count the missed target:\n%s", out.String())
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# Performance\n\nkept\n\n"+BeginMarker) || !strings.Contains(string(b), "Measured on:") || !strings.Contains(string(b), "uname -a") {
		t.Fatalf("document:\n%s", b)
	}
}

// TestNoDocWithoutTheFlag: report run as make bench runs it (no -doc), in
// a directory holding docs/performance.md, prints the table and writes no
// document; with -doc it rewrites that one.
func TestNoDocWithoutTheFlag(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	in := filepath.Join(dir, "bench.out")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join("docs", "performance.md")
	if err := os.MkdirAll("docs", 0o755); err != nil {
		t.Fatal(err)
	}
	const before = "# Performance\n\nkept\n"
	if err := os.WriteFile(doc, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if code := cli([]string{"-in", in}, &out, &errOut); code != 0 {
		t.Fatalf("report -in: exit %d\n%s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "1 target(s) missed") || strings.Contains(out.String(), "wrote") {
		t.Errorf("report -in: output\n%s\nwant the table and no document written", out.String())
	}
	if b, err := os.ReadFile(doc); err != nil || string(b) != before {
		t.Fatalf("report without -doc changed %s: %v\n%s", doc, err, b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("report without -doc left %d entries in its directory, want bench.out and docs", len(entries))
	}
	if code := cli([]string{"-in", in, "-doc", doc}, &out, &errOut); code != 0 {
		t.Fatalf("report -doc: exit %d\n%s", code, errOut.String())
	}
	if b, _ := os.ReadFile(doc); !strings.Contains(string(b), BeginMarker) {
		t.Fatalf("report -doc did not write the table into %s:\n%s", doc, b)
	}
}
