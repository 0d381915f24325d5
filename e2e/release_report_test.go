package e2e

// This file turns TestReleaseStrategies' rounds into its report: kubelet's
// own moments from its --v=4 log, the per-strategy and per-signal tables,
// and their section of docs/performance.md.

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/stats"
)

// Kubelet's V(4) lines for a terminated pod (docs/kubelet-hold.md, 1):
// the first is logged in completeTerminated under the lock that releases
// the pod's name, the second right after its cgroup's removal.
const (
	releaseLine  = `"Pod is complete and the worker can now stop"`
	cgroupLogged = `"Pod termination removed cgroups"`
)

// parseKlogTime reads the timestamp of a klog header ("I1203
// 11:24:32.123456 ..."), which has no year: it is the one that puts the
// moment closest to now, in the local zone kubelet writes in.
func parseKlogTime(line string, now time.Time) (time.Time, bool) {
	if len(line) < 21 || !strings.ContainsRune("IWEF", rune(line[0])) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], now.Location())
	if err != nil {
		return time.Time{}, false
	}
	t = t.AddDate(now.Year(), 0, 0)
	if t.Sub(now) > 24*time.Hour { // a December line read in January
		t = t.AddDate(-1, 0, 0)
	}
	return t, true
}

// addKubeletLog fills each round's Release and CgLog from kubelet's log:
// the lines naming its old pod's UID.
func addKubeletLog(rs []roundResult, logPath string) error {
	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	byUID := map[string]*roundResult{}
	for i := range rs {
		if rs[i].OldUID != "" {
			byUID[`podUID="`+rs[i].OldUID+`"`] = &rs[i]
		}
	}
	now := time.Now()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		rel, cg := strings.Contains(line, releaseLine), strings.Contains(line, cgroupLogged)
		if !rel && !cg {
			continue
		}
		for key, r := range byUID {
			if !strings.Contains(line, key) {
				continue
			}
			if t, ok := parseKlogTime(line, now); ok {
				if rel && r.Release.IsZero() {
					r.Release = t
				}
				if cg && r.CgLog.IsZero() {
					r.CgLog = t
				}
			}
		}
	}
	return sc.Err()
}

func (r roundResult) summary() string {
	if r.Err != "" {
		return "FAILED: " + r.Err
	}
	return fmt.Sprintf("gone +%s, cgroup gone +%s, write +%s, new process +%s after the write, answering +%s after the removal",
		secs(r.Gone.Sub(r.Remove)), secs(r.Cg.Sub(r.Remove)), secs(r.Write.Sub(r.Remove)), secs(r.New.Sub(r.Write)), secs(r.Active.Sub(r.Remove)))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// heldAfter: a new process later than this after its write was held by
// kubelet (its retry is 10 s + up to 50 %; a free name starts in ~1 s).
const heldAfter = 5 * time.Second

// benchReport is TestReleaseStrategies' outcome.
type benchReport struct {
	Kubelet    string
	Rounds     int
	Date       time.Time
	Strategies []strategy
	Results    []roundResult
	Load       int // busy loops running through the rounds
}

// spread is the quantiles of ds: min, p50 (the mean of the middle two for
// an even count), max.
func spread(ds []time.Duration) (lo, p50, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	p50 = s[len(s)/2]
	if len(s)%2 == 0 {
		p50 = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[0], p50, s[len(s)-1]
}

// intervals is f of every round of strategy key ("" for every strategy)
// where ok holds.
func (rep benchReport) intervals(key string, ok func(roundResult) bool, f func(roundResult) time.Duration) []time.Duration {
	var out []time.Duration
	for _, r := range rep.Results {
		if r.Err == "" && (key == "" || r.Strategy == key) && ok(r) {
			out = append(out, f(r))
		}
	}
	return out
}

func always(roundResult) bool { return true }

func released(r roundResult) bool { return !r.Release.IsZero() }

// markdown is the generated part of the docs section.
func (rep benchReport) markdown() string {
	var b strings.Builder
	osr, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(&b, "Measured %s by `make bench-kubelet` (e2e/release_test.go): kubelet %s at --v=4 on containerd (cgroupfs driver, cgroup v1), "+
		"Linux %s, %d cores; one stand-in kube-scheduler pod in kubeadm's manifest shape (a hostPath volume, probes, burstable); "+
		"%d replacements per strategy, the strategies interleaved, 1-3 s apart. Each replacement gives the pod a new UID. "+
		"Removal and write are durable (fsync), timed at the rename or the directory's fsync; the signals are polled every %s.\n\n",
		rep.Date.Format("2006-01-02 15:04 UTC"), rep.Kubelet, strings.TrimSpace(string(osr)), runtime.NumCPU(), rep.Rounds, watchPoll)
	if rep.Load > 0 {
		fmt.Fprintf(&b, "Busy node: %d shell loops spinning through every round (`STRATUM_BENCH_LOAD=%d`).\n\n", rep.Load, rep.Load)
	}
	b.WriteString("| strategy | write -> new process, p50 / max | removal -> new process answering, p50 / max | old process gone -> new one answering (outage), p50 / max | held (new process > 5 s after the write) | write - release, min / p50 |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, s := range rep.Strategies {
		start := rep.intervals(s.Key, always, func(r roundResult) time.Duration { return r.New.Sub(r.Write) })
		down := rep.intervals(s.Key, always, func(r roundResult) time.Duration { return r.Active.Sub(r.Remove) })
		out := rep.intervals(s.Key, always, func(r roundResult) time.Duration { return r.Active.Sub(r.Gone) })
		early := rep.intervals(s.Key, released, func(r roundResult) time.Duration { return r.Write.Sub(r.Release) })
		held := 0
		for _, d := range start {
			if d > heldAfter {
				held++
			}
		}
		_, sp, sm := spread(start)
		_, dp, dm := spread(down)
		_, op, om := spread(out)
		el, ep, _ := spread(early)
		fmt.Fprintf(&b, "| (%s) %s | %.2f / %.2f s | %.2f / %.2f s | %.2f / %.2f s | %d of %d | %s |\n", s.Key, s.Name,
			sp.Seconds(), sm.Seconds(), dp.Seconds(), dm.Seconds(), op.Seconds(), om.Seconds(), held, len(start), pair(el, ep, len(early)))
	}
	b.WriteString("\nWhen kubelet released the old pod's name (\"release\": its log line " + releaseLine + ", in completeTerminated), " +
		"against what a node shows, over every round of every strategy:\n\n")
	b.WriteString("| interval | min | p50 | p90 | max | rounds |\n|---|---|---|---|---|---|\n")
	rows := []struct {
		name string
		ok   func(roundResult) bool
		f    func(roundResult) time.Duration
	}{
		{"old process gone -> release", released, func(r roundResult) time.Duration { return r.Release.Sub(r.Gone) }},
		{"pod cgroup gone (seen) -> release", released, func(r roundResult) time.Duration { return r.Release.Sub(r.Cg) }},
		{"old process gone -> pod cgroup gone (seen)", always, func(r roundResult) time.Duration { return r.Cg.Sub(r.Gone) }},
		{"removal -> old process gone", always, func(r roundResult) time.Duration { return r.Gone.Sub(r.Remove) }},
		{"log \"removed cgroups\" -> pod cgroup gone (seen)", func(r roundResult) bool { return !r.CgLog.IsZero() },
			func(r roundResult) time.Duration { return r.Cg.Sub(r.CgLog) }},
	}
	for _, row := range rows {
		ds := rep.intervals("", row.ok, row.f)
		lo, p50, hi := spread(ds)
		fmt.Fprintf(&b, "| %s | %.2f s | %.2f s | %.2f s | %.2f s | %d |\n", row.name, lo.Seconds(), p50.Seconds(), stats.Quantile(ds, 0.9).Seconds(), hi.Seconds(), len(ds))
	}
	early := rep.intervals("", released, func(r roundResult) time.Duration { return r.Release.Sub(r.Cg) })
	n := 0
	for _, d := range early {
		if d > housekeepingEarly {
			n++
		}
	}
	fmt.Fprintf(&b, "\nThe pod cgroup was gone more than %s before the release (removed by housekeeping, not by the pod's worker) in %d of %d rounds.\n",
		housekeepingEarly, n, len(early))
	rep.replay(&b)
	return b.String()
}

// replayRules are write rules replayed on every round's moments: when
// each would have written, against the release.
var replayRules = []strategy{
	{Name: "gone + 1.5 s", Gone: true, AfterGone: 1500 * time.Millisecond},
	{Name: "gone + 2.5 s", Gone: true, AfterGone: 2500 * time.Millisecond},
	{Name: "cgroup gone + 0.5 s", Cg: true, AfterCg: 500 * time.Millisecond},
	{Name: "cgroup gone + 0.75 s", Cg: true, AfterCg: 750 * time.Millisecond},
	{Name: "max(gone + 1.2 s, cgroup gone + 0.3 s)", Gone: true, AfterGone: 1200 * time.Millisecond, Cg: true, AfterCg: 300 * time.Millisecond},
	{Name: "max(gone + 1.5 s, cgroup gone + 0.5 s)", Gone: true, AfterGone: 1500 * time.Millisecond, Cg: true, AfterCg: 500 * time.Millisecond},
}

// writeAt is when s writes, given a round's old process exit and cgroup
// removal.
func (s strategy) writeAt(gone, cg time.Time) time.Time {
	var at time.Time
	if s.Gone {
		at = gone.Add(s.AfterGone)
	}
	if c := cg.Add(s.AfterCg); s.Cg && c.After(at) {
		at = c
	}
	return at
}

// replay writes the table of replayRules: for each, its margin over the
// release (write - release) in every round, and how many rounds it would
// have written before the release, which kubelet holds.
func (rep benchReport) replay(b *strings.Builder) {
	b.WriteString("\nEach rule replayed on every round's moments: when it would have written, against the release (below 0 is before it: kubelet holds the pod), " +
		"and how long after the old process's exit (the outage is that plus the write -> new process time above):\n\n")
	b.WriteString("| rule | write - release, min / p10 / p50 | writes before the release | old process gone -> write, p50 / max |\n|---|---|---|---|\n")
	for _, s := range replayRules {
		margin := rep.intervals("", released, func(r roundResult) time.Duration { return s.writeAt(r.Gone, r.Cg).Sub(r.Release) })
		wait := rep.intervals("", released, func(r roundResult) time.Duration { return s.writeAt(r.Gone, r.Cg).Sub(r.Gone) })
		early := 0
		for _, d := range margin {
			if d < 0 {
				early++
			}
		}
		lo, p50, _ := spread(margin)
		_, wp, wm := spread(wait)
		fmt.Fprintf(b, "| %s | %.2f / %.2f / %.2f s | %d of %d | %.2f / %.2f s |\n", s.Name, lo.Seconds(), stats.Quantile(margin, 0.1).Seconds(), p50.Seconds(),
			early, len(margin), wp.Seconds(), wm.Seconds())
	}
}

// housekeepingEarly: a pod cgroup gone this long before the release was
// removed by housekeeping (cleanupOrphanedPodCgroups); the worker's own
// removal comes within a poll of it.
const housekeepingEarly = 100 * time.Millisecond

func pair(lo, p50 time.Duration, n int) string {
	if n == 0 {
		return "- (no log line)"
	}
	return fmt.Sprintf("%.2f / %.2f s", lo.Seconds(), p50.Seconds())
}

// docSection is a generated part of docs/performance.md: a heading, and
// the markers the generated text sits between.
type docSection struct{ Heading, Begin, End string }

// benchSection is the generated section of kubelet's run on an otherwise
// idle node, or with STRATUM_BENCH_LOAD busy loops (busy), one per kubelet
// version. writeSection adds a section before sectionBefore the first time.
func benchSection(kubelet string, busy bool) docSection {
	if busy {
		return docSection{
			Heading: "### The same on a busy node (kubelet " + kubelet + ")",
			Begin:   "<!-- BEGIN e2e/release_test.go, kubelet " + kubelet + ", busy: generated by `STRATUM_BENCH_LOAD=n make bench-kubelet`, do not edit -->",
			End:     "<!-- END e2e/release_test.go, kubelet " + kubelet + ", busy -->",
		}
	}
	return docSection{
		Heading: "## Under the real kubelet " + kubelet + ": replacement strategies",
		Begin:   "<!-- BEGIN e2e/release_test.go, kubelet " + kubelet + ": generated by `make bench-kubelet`, do not edit -->",
		End:     "<!-- END e2e/release_test.go, kubelet " + kubelet + " -->",
	}
}

const sectionBefore = "## What each number is"

// writeSection puts body into section sec of the file at path, leaving
// the rest of it as it was.
func writeSection(path string, sec docSection, body string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceSection(string(b), sec, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// replaceSection is doc with body between sec's markers; without them, the
// section (heading, markers, body) is inserted before sectionBefore, or
// appended.
func replaceSection(doc string, sec docSection, body string) (string, error) {
	body = strings.TrimRight(body, "\n") + "\n"
	i, j := strings.Index(doc, sec.Begin), strings.Index(doc, sec.End)
	switch {
	case i >= 0 && j > i:
		return doc[:i+len(sec.Begin)] + "\n" + body + doc[j:], nil
	case i >= 0 || j >= 0:
		return "", fmt.Errorf("one of the markers of %q is missing or they are out of order: fix them by hand", sec.Heading)
	}
	section := sec.Heading + "\n\n" + sec.Begin + "\n" + body + sec.End + "\n"
	if k := strings.Index(doc, "\n"+sectionBefore+"\n"); k >= 0 {
		return doc[:k+1] + section + "\n" + doc[k+1:], nil
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + section, nil
}
