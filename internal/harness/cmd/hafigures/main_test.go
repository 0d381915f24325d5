package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScanCollectsFiguresAndVerdicts(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Test":"TestHAOne"}`,
		`{"Action":"output","Test":"TestHAOne","Output":"    ha_test.go:250: HA figures: one: 100 of 100\n"}`,
		`{"Action":"pass","Test":"TestHAOne"}`,
		`{"Action":"output","Test":"TestHAKubeadmRolloutAtOnce","Output":"    kubeadm_ha_test.go:140: kubeadm-shaped cluster: max members down at once 1, writes acked 9/9, 0 lost, API 99.95%\n"}`,
		`{"Action":"output","Test":"TestHAKubeadmRolloutAtOnce","Output":"    kubeadm_ha_test.go:141: member probe: kubeadm-shaped cluster lines are not this one\n"}`,
		`{"Action":"output","Test":"TestHAKubeadmRolloutAtOnce","Output":"    kubeadm_ha_test.go:66: kubeadm-shaped cluster up\n"}`,
		`{"Action":"output","Test":"TestHATwo","Output":"    ha_test.go:9: HA figures: two: 3 lost\n"}`,
		`{"Action":"output","Test":"TestHATwo","Output":"    ha_test.go:10: node-1: run exit 6\n"}`,
		`{"Action":"output","Test":"TestHATwo","Output":"        the gate refused\n"}`,
		`{"Action":"output","Test":"TestHATwo","Output":"    start.go:70: container log x:\n"}`,
		`{"Action":"output","Test":"TestHATwo","Output":"        etcd said hello\n"}`,
		`{"Action":"fail","Test":"TestHATwo/sub"}`,
		`{"Action":"fail","Test":"TestHATwo"}`,
		`not json`,
	}, "\n")
	r := scan(strings.NewReader(in), io.Discard)
	if strings.Join(r.figures, "|") != "one: 100 of 100|kubeadm-shaped cluster: max members down at once 1, writes acked 9/9, 0 lost, API 99.95%|two: 3 lost" || strings.Join(r.failed, ",") != "TestHATwo" || strings.Join(r.passed, ",") != "TestHAOne" || r.code != 1 {
		t.Fatalf("figures %q failed %q passed %q code %d", r.figures, r.failed, r.passed, r.code)
	}
	// The failure is kept with its continuation, not the container log
	// dumped after it; a passed test keeps none.
	if got, want := strings.Join(r.why["TestHATwo"], ""), "    ha_test.go:9: HA figures: two: 3 lost\n    ha_test.go:10: node-1: run exit 6\n        the gate refused\n"; got != want || len(r.why["TestHAOne"]) != 0 {
		t.Fatalf("why TestHATwo %q, want %q; why TestHAOne %q", got, want, r.why["TestHAOne"])
	}
	if r := scan(strings.NewReader(`{"Action":"output","Output":"ok\n"}`), io.Discard); r.code != 1 {
		t.Fatalf("no test ran: code %d, want 1", r.code)
	}
}

func TestSplice(t *testing.T) {
	block := Block([]string{"a"})
	doc := Splice("# P\n\ntext\n", block)
	if doc != "# P\n\ntext\n\n"+block {
		t.Fatalf("append: %q", doc)
	}
	again := Splice(doc+"after\n", Block([]string{"b"}))
	if !strings.Contains(again, "- b\n") || strings.Contains(again, "- a\n") || !strings.HasSuffix(again, "after\n") || strings.Count(again, BeginMarker) != 1 {
		t.Fatalf("replace: %q", again)
	}
}

// TestNoDocWithoutTheFlag: hafigures run as make ha runs it (no -doc), in
// a directory holding docs/performance.md, prints the figures and writes
// no file; with -doc it writes them into that one.
func TestNoDocWithoutTheFlag(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	in := strings.Join([]string{
		`{"Action":"run","Test":"TestHAOne"}`,
		`{"Action":"output","Test":"TestHAOne","Output":"    ha_test.go:250: HA figures: one: 100 of 100\n"}`,
		`{"Action":"pass","Test":"TestHAOne"}`,
	}, "\n")
	doc := filepath.Join("docs", "performance.md")
	if err := os.MkdirAll("docs", 0o755); err != nil {
		t.Fatal(err)
	}
	const before = "# Performance\n\nkept\n"
	if err := os.WriteFile(doc, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code := cli(nil, strings.NewReader(in), &out, io.Discard); code != 0 {
		t.Fatalf("hafigures: exit %d\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "one: 100 of 100") {
		t.Errorf("hafigures: output\n%s\nwant the figures", out.String())
	}
	if b, err := os.ReadFile(doc); err != nil || string(b) != before {
		t.Fatalf("hafigures without -doc changed %s: %v\n%s", doc, err, b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("hafigures without -doc left %d entries in its directory, want docs alone", len(entries))
	}
	if code := cli([]string{"-doc", doc}, strings.NewReader(in), io.Discard, io.Discard); code != 0 {
		t.Fatalf("hafigures -doc: exit %d", code)
	}
	if b, _ := os.ReadFile(doc); !strings.Contains(string(b), "- one: 100 of 100") {
		t.Fatalf("hafigures -doc did not write the figures into %s:\n%s", doc, b)
	}
}
