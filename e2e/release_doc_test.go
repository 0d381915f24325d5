package e2e

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReplaceSection: the first run inserts the section before "What each
// number is"; a rerun replaces only what is between the markers; a lone
// marker is an error, never a guess.
func TestReplaceSection(t *testing.T) {
	idleSection, loadSection := benchSection("v1.34.4", false), benchSection("v1.34.4", true)
	doc := "# Performance\n\nintro\n\n" + sectionBefore + "\n\nrest\n"
	once, err := replaceSection(doc, idleSection, "table one\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Performance\n\nintro\n\n" + idleSection.Heading + "\n\n" + idleSection.Begin + "\ntable one\n" + idleSection.End + "\n\n" + sectionBefore + "\n\nrest\n"
	if once != want {
		t.Fatalf("first run:\n%s\nwant:\n%s", once, want)
	}
	edited := strings.Replace(once, "intro", "intro edited by hand", 1)
	twice, err := replaceSection(edited, idleSection, "table two")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(edited, "table one", "table two", 1); twice != want {
		t.Fatalf("rerun:\n%s\nwant:\n%s", twice, want)
	}
	if got, _ := replaceSection("no anchor\n", idleSection, "x"); !strings.HasSuffix(got, "no anchor\n\n"+idleSection.Heading+"\n\n"+idleSection.Begin+"\nx\n"+idleSection.End+"\n") {
		t.Errorf("without the anchor heading the section is appended; got:\n%s", got)
	}
	// the busy section is added after the idle one, which stays
	both, err := replaceSection(twice, loadSection, "busy table")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(twice, sectionBefore, loadSection.Heading+"\n\n"+loadSection.Begin+"\nbusy table\n"+loadSection.End+"\n\n"+sectionBefore, 1); both != want {
		t.Fatalf("busy section:\n%s\nwant:\n%s", both, want)
	}
	// another kubelet's section is one of its own, added before the anchor;
	// rewriting it leaves the first kubelet's sections as they are
	other := benchSection("v1.37.2", false)
	three, err := replaceSection(both, other, "1.37 table")
	if err != nil {
		t.Fatal(err)
	}
	again, err := replaceSection(three, other, "1.37 table, rerun")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(again, idleSection.Begin+"\ntable two\n"+idleSection.End) || !strings.Contains(again, loadSection.Begin+"\nbusy table\n") ||
		!strings.Contains(again, other.Heading+"\n\n"+other.Begin+"\n1.37 table, rerun\n"+other.End+"\n\n"+sectionBefore) || other.Begin == idleSection.Begin {
		t.Fatalf("a second kubelet's section:\n%s", again)
	}
	if _, err := replaceSection("a\n"+idleSection.Begin+"\nb\n", idleSection, "x"); err == nil {
		t.Error("a BEGIN marker without END: no error")
	}
}

// TestParseKlogTime: klog's header has no year; the year is the one that
// puts the line nearest now, so a December line read on January 1st is
// last year's.
func TestParseKlogTime(t *testing.T) {
	now := time.Date(2026, 12, 3, 11, 30, 0, 0, time.UTC)
	got, ok := parseKlogTime(`I1203 11:24:32.123456   12345 pod_workers.go:1486] "Pod is complete and the worker can now stop"`, now)
	if want := time.Date(2026, 12, 3, 11, 24, 32, 123456000, time.UTC); !ok || !got.Equal(want) {
		t.Errorf("got %v %v, want %v", got, ok, want)
	}
	jan := time.Date(2027, 1, 1, 0, 0, 1, 0, time.UTC)
	got, ok = parseKlogTime("I1231 23:59:59.500000 1 x.go:1] m", jan)
	if want := time.Date(2026, 12, 31, 23, 59, 59, 500000000, time.UTC); !ok || !got.Equal(want) {
		t.Errorf("across the new year: got %v %v, want %v", got, ok, want)
	}
	for _, bad := range []string{"", "time=\"2026-12-03\" level=info", "I12x3 11:24:32.123456 1 x.go:1] m"} {
		if _, ok := parseKlogTime(bad, now); ok {
			t.Errorf("%q parsed as a klog line", bad)
		}
	}
}

// TestSpread: min, median (mean of the middle two for an even count), max.
func TestSpread(t *testing.T) {
	s := time.Second
	if lo, p50, hi := spread([]time.Duration{4 * s, 1 * s, 3 * s, 2 * s}); lo != s || p50 != 2500*time.Millisecond || hi != 4*s {
		t.Errorf("got %v %v %v", lo, p50, hi)
	}
	if lo, p50, hi := spread([]time.Duration{3 * s, 1 * s, 2 * s}); lo != s || p50 != 2*s || hi != 3*s {
		t.Errorf("got %v %v %v", lo, p50, hi)
	}
}

// TestWriteAt: a rule writes at the later of its enabled signals plus
// their margins; a signal it does not wait for does not count.
func TestWriteAt(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	gone, cg := t0, t0.Add(time.Second)
	both := strategy{Gone: true, AfterGone: 1500 * time.Millisecond, Cg: true, AfterCg: 300 * time.Millisecond}
	if got := both.writeAt(gone, cg); !got.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Errorf("gone term later: %v", got.Sub(t0))
	}
	if got := both.writeAt(gone, t0.Add(1400*time.Millisecond)); !got.Equal(t0.Add(1700 * time.Millisecond)) {
		t.Errorf("cgroup term later: %v", got.Sub(t0))
	}
	if got := (strategy{Cg: true, AfterCg: 500 * time.Millisecond}).writeAt(gone, cg); !got.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Errorf("cgroup only: %v", got.Sub(t0))
	}
	if got := (strategy{Gone: true}).writeAt(gone, cg); !got.Equal(gone) {
		t.Errorf("gone only, no margin: %v", got.Sub(t0))
	}
}

// TestStartLoad: the busy loops run while the test does and are gone,
// reaped, once it ends.
func TestStartLoad(t *testing.T) {
	var pids []int
	t.Run("load", func(t *testing.T) {
		before, _ := processesWith("while :; do :; done")
		startLoad(t, 2)
		after, _ := processesWith("while :; do :; done")
		for _, p := range after {
			if !slices.Contains(before, p) {
				pids = append(pids, p)
			}
		}
		if len(pids) != 2 {
			t.Fatalf("%d new busy loops, want 2", len(pids))
		}
	})
	for _, p := range pids {
		if err := syscall.Kill(p, 0); err == nil {
			t.Errorf("busy loop %d still runs after the test", p)
		}
	}
}
