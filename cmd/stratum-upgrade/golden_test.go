package main

import (
	"os"
	"regexp"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// normalizers replace what changes from one run to the next in a
// command's output, so that a golden file pins the rest of it exactly.
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{8}T\d{6}Z-[0-9a-f]{4}`), "TXN"},
	{regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`), "TIME"},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "BOOT"},
	{regexp.MustCompile(`\b(tick|pid) \d+`), "$1 N"},
	{regexp.MustCompile(`"(ticks|startTicks|pid|elapsedNs|size|revision)":\d+`), `"$1":N`},
	// A duration's width varies: so does the padding of its table column.
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m\d+(\.\d+)?s)\b {2,}`), "DUR  "},
	{regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m\d+(\.\d+)?s)\b`), "DUR"},
	{regexp.MustCompile(`go1\.[0-9.]+`), "GOVERSION"},
	{regexp.MustCompile(`\b(linux|darwin)/[a-z0-9]+\b`), "PLATFORM"},
}

// cmpnorm stdout|stderr|FILE WANT compares the output (or FILE) with WANT
// after the normalizers: $WORK becomes "$WORK", a transaction id "TXN", a
// time "TIME", a boot id "BOOT", ticks, pids, sizes and nanoseconds "N", a
// duration "DUR" (and the padding after it in a table two spaces), the Go
// version "GOVERSION", the platform "PLATFORM".
func cmdCmpNorm(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: cmpnorm stdout|stderr|file want")
	}
	got := ts.ReadFile(args[0])
	got = strings.ReplaceAll(got, ts.Getenv("WORK"), "$WORK")
	for _, n := range normalizers {
		got = n.re.ReplaceAllString(got, n.with)
	}
	want := ts.ReadFile(args[1])
	if got == want {
		return
	}
	if f := os.Getenv("STRATUM_GOLDEN_DUMP"); f != "" {
		ts.Check(os.WriteFile(f, []byte(got), 0o644))
	}
	ts.Logf("[diff -%s +%s]\n%s", args[1], args[0], diffLines(want, got))
	ts.Fatalf("%s and %s differ (after normalizing)", args[0], args[1])
}

// diffLines marks each line of want not in got with -, and each of got not
// in want with +: enough to see what changed in a short golden file.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl == gl {
			b.WriteString(" " + wl + "\n")
			continue
		}
		if i < len(w) {
			b.WriteString("-" + wl + "\n")
		}
		if i < len(g) {
			b.WriteString("+" + gl + "\n")
		}
	}
	return b.String()
}
