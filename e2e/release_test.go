package e2e

// TestReleaseStrategies (make bench-kubelet) measures, on the real kubelet,
// when kubelet releases a removed static pod's name and what each way of
// replacing a manifest costs (issue 18, docs/kubelet-hold.md).

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/proc"
)

// EnvBenchKubelet, set to 1 with EnvE2E, runs TestReleaseStrategies: not
// part of make e2e-kubelet (minutes of CI time for figures, not a check).
const EnvBenchKubelet = "STRATUM_BENCH_KUBELET"

// EnvBenchRounds is the number of replacements per strategy (default 10).
const EnvBenchRounds = "STRATUM_BENCH_N"

// EnvBenchStrategies picks the strategies by key, e.g. "cde" (default:
// every one).
const EnvBenchStrategies = "STRATUM_BENCH_STRATEGIES"

// EnvBenchLoad is a number of busy loops (sh processes, each spinning on
// a core) to run through the rounds: kubelet on a busy node. The tables
// then go into a section of their own.
const EnvBenchLoad = "STRATUM_BENCH_LOAD"

// strategy is one way to replace a static pod's manifest. Except in place,
// the manifest is removed and the new one written once every signal it
// waits for has been seen, plus that signal's margin.
type strategy struct {
	Key, Name string
	InPlace   bool
	Gone      bool          // wait until the old process is gone
	AfterGone time.Duration // then this long
	Cg        bool          // wait until the old pod's cgroup directories are gone
	AfterCg   time.Duration // then this long
}

var strategies = []strategy{
	{Key: "a", Name: "in-place rewrite (today's upgrade step)", InPlace: true},
	{Key: "b", Name: "remove; old process gone; write", Gone: true},
	{Key: "c", Name: "remove; gone + 2.5 s; write (today's rollback)", Gone: true, AfterGone: 2500 * time.Millisecond},
	{Key: "d", Name: "remove; pod cgroup gone; write", Cg: true},
	{Key: "e", Name: "remove; pod cgroup gone + 0.5 s; write", Cg: true, AfterCg: 500 * time.Millisecond},
	{Key: "f", Name: "remove; max(gone + 1.5 s, cgroup gone + 0.5 s); write", Gone: true, AfterGone: 1500 * time.Millisecond, Cg: true, AfterCg: 500 * time.Millisecond},
	{Key: "g", Name: "remove; max(gone + 1.2 s, cgroup gone + 0.3 s); write", Gone: true, AfterGone: 1200 * time.Millisecond, Cg: true, AfterCg: 300 * time.Millisecond},
}

// roundResult is one replacement. Release and CgLog come from kubelet's
// log (zero when not found); the other moments from this process.
type roundResult struct {
	Strategy string    `json:"strategy"`
	Round    int       `json:"round"`
	OldUID   string    `json:"oldUID"`
	Remove   time.Time `json:"remove"`
	Gone     time.Time `json:"gone"`
	Cg       time.Time `json:"cgroupGone"`
	Write    time.Time `json:"write"`
	New      time.Time `json:"newProcess"`
	Active   time.Time `json:"active"`
	Release  time.Time `json:"release,omitzero"`
	CgLog    time.Time `json:"cgroupRemovedLog,omitzero"`
	Err      string    `json:"err,omitempty"`
	Load     int       `json:"load,omitempty"` // busy loops running
	Kubelet  string    `json:"kubelet,omitempty"`
}

// TestReleaseStrategies runs one kubelet at --v=4 with one stand-in
// kube-scheduler pod and replaces it N times per strategy, the strategies
// interleaved round by round so that a slow minute of the machine hits
// them all alike. It writes the table into docs/performance.md and the raw
// rounds into <cache>/e2e/bench-kubelet-<version>.json, per kubelet.
func TestReleaseStrategies(t *testing.T) {
	requireE2E(t)
	if os.Getenv(EnvBenchKubelet) != "1" {
		t.Skipf("a measurement, not a check: set %s=1 (make bench-kubelet)", EnvBenchKubelet)
	}
	n := 10
	if v := os.Getenv(EnvBenchRounds); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of rounds", EnvBenchRounds, v)
		}
	}
	var run []strategy
	for _, s := range strategies {
		if keys := os.Getenv(EnvBenchStrategies); keys == "" || strings.Contains(keys, s.Key) {
			run = append(run, s)
		}
	}
	if len(run) == 0 {
		t.Fatalf("%s=%q names no strategy (keys a-%s)", EnvBenchStrategies, os.Getenv(EnvBenchStrategies), strategies[len(strategies)-1].Key)
	}
	load := 0
	if v := os.Getenv(EnvBenchLoad); v != "" {
		var err error
		if load, err = strconv.Atoi(v); err != nil || load < 0 {
			t.Fatalf("%s=%q: want a number of busy loops", EnvBenchLoad, v)
		}
	}
	ks, _, err := kubeletsFor()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		t.Run(k.Version, func(t *testing.T) { releaseStrategies(t, k, n, run, load) })
	}
}

// releaseStrategies is TestReleaseStrategies under kubelet k: its rounds
// go to <cache>/e2e/bench-kubelet-<version>.json, its tables to k's
// section of docs/performance.md.
func releaseStrategies(t *testing.T, k Kubelet, n int, run []strategy, load int) {
	h := startHostWith(t, k, HostOptions{KubeletVerbosity: 4})
	ports, err := testbed.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{h: h, port: ports[0], path: filepath.Join(h.ManifestDir, "kube-scheduler.yaml")}
	b.health = fmt.Sprintf("https://127.0.0.1:%d/healthz", b.port)
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	startLoad(t, load)
	var results []roundResult
	began := time.Now().UTC()
	for i := 1; i <= n; i++ {
		for _, s := range run {
			r := b.replace(s, i)
			r.Load, r.Kubelet = load, k.Version
			if r.Err != "" {
				t.Errorf("strategy %s round %d: %s", s.Key, i, r.Err)
				if err := b.recover(); err != nil {
					t.Fatalf("after the failed round: %v\nkubelet log:\n%s", err, tailFile(h.KubeletLog, 60))
				}
			}
			t.Logf("%s #%d: %s", s.Key, i, r.summary())
			results = append(results, r)
			time.Sleep(time.Second + rand.N(2*time.Second)) // any phase of kubelet's 1 s and 2 s loops
		}
	}
	if err := addKubeletLog(results, h.KubeletLog); err != nil {
		t.Errorf("reading kubelet's log: %v", err)
	}
	saveRounds(t, k.Version, results)
	writeReport(t, benchReport{Kubelet: k.Version, Rounds: n, Date: began, Strategies: run, Results: results, Load: load})
}

// startLoad starts n busy loops, stopped by PID when t ends; a test
// binary that dies takes them with it (Pdeathsig).
func startLoad(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := kubeletsim.Spawn(cmd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	if n > 0 {
		t.Logf("%d busy loops running", n)
	}
}

// EnvBenchFrom names a bench-kubelet-<version>.json that TestReleaseReport turns
// into docs/performance.md's section again, without a kubelet: for a
// change to the report's tables.
const EnvBenchFrom = "STRATUM_BENCH_FROM"

// TestReleaseReport rewrites the section from saved rounds.
func TestReleaseReport(t *testing.T) {
	from := os.Getenv(EnvBenchFrom)
	if from == "" {
		t.Skipf("set %s to a bench-kubelet-<version>.json to rewrite its docs/performance.md section", EnvBenchFrom)
	}
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	var rs []roundResult
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatalf("%s: %v", from, err)
	}
	if len(rs) == 0 {
		t.Fatalf("%s holds no rounds", from)
	}
	if rs[0].Kubelet == "" {
		t.Fatalf("%s: its rounds do not say which kubelet they ran under (saved before they did): add \"kubelet\": \"v1.34.4\" to them", from)
	}
	rep := benchReport{Kubelet: rs[0].Kubelet, Date: rs[0].Remove.UTC(), Results: rs}
	for _, s := range strategies {
		if slices.ContainsFunc(rs, func(r roundResult) bool { return r.Strategy == s.Key }) {
			rep.Strategies = append(rep.Strategies, s)
		}
	}
	for _, r := range rs {
		if r.Err != "" {
			t.Errorf("round %s #%d failed: %s", r.Strategy, r.Round, r.Err)
		}
		rep.Rounds = max(rep.Rounds, r.Round)
		rep.Load = r.Load
	}
	writeReport(t, rep)
}

// writeReport logs rep's tables and, unless t failed, writes them into
// docs/performance.md.
func writeReport(t *testing.T, rep benchReport) {
	t.Helper()
	t.Logf("\n%s", rep.markdown())
	if t.Failed() {
		t.Log("not writing docs/performance.md: some rounds failed")
		return
	}
	repo, err := build.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sec := benchSection(rep.Kubelet, rep.Load > 0)
	if err := writeSection(filepath.Join(repo, "docs", "performance.md"), sec, rep.markdown()); err != nil {
		t.Fatal(err)
	}
}

// bench is the one pod TestReleaseStrategies replaces.
type bench struct {
	h            *Host
	port         int
	path, health string
	round        int // the annotation of the manifest in place
}

// start writes the first manifest and waits until its process answers.
func (b *bench) start() error {
	if _, err := writeDurable(b.path, benchManifest(b.h, b.port, 0)); err != nil {
		return err
	}
	return b.waitServing(2 * time.Minute)
}

// recover puts a manifest in place again after a failed round and waits
// until exactly one process of it answers.
func (b *bench) recover() error {
	b.round++
	if _, err := writeDurable(b.path, benchManifest(b.h, b.port, 1000+b.round)); err != nil {
		return err
	}
	return b.waitServing(time.Minute)
}

func (b *bench) waitServing(timeout time.Duration) error {
	w := watch(b.h, nil, nil, b.health)
	w.written.Store(true)
	return w.wait(timeout)
}

// replace runs one round of s: the new manifest differs from the old by its
// annotation, so kubelet sees a new pod (new UID) of the same name.
func (b *bench) replace(s strategy, round int) (r roundResult) {
	r = roundResult{Strategy: s.Key, Round: round}
	fail := func(format string, a ...any) roundResult {
		r.Err = fmt.Sprintf(format, a...)
		return r
	}
	old, err := b.h.ComponentPIDs(benchBinary)
	if err != nil || len(old) != 1 {
		return fail("want one %s process before the round, have %v (%v)", benchBinary, old, err)
	}
	dirs, err := proc.Host().PodCgroups(old)
	if err != nil || len(dirs) == 0 {
		return fail("the old pod's cgroup directories: %v %v", dirs, err)
	}
	r.OldUID = strings.TrimPrefix(filepath.Base(dirs[0]), "pod")
	b.round++
	next := benchManifest(b.h, b.port, b.round)
	w := watch(b.h, old, dirs, b.health)
	if s.InPlace {
		w.written.Store(true)
		if r.Write, err = writeDurable(b.path, next); err != nil {
			w.stop()
			return fail("write: %v", err)
		}
		r.Remove = r.Write
	} else {
		if r.Remove, err = removeDurable(b.path); err != nil {
			w.stop()
			return fail("remove: %v", err)
		}
		var at time.Time
		if s.Gone {
			if !waitClosed(w.gone, time.Minute) {
				w.stop()
				return fail("the old process still runs a minute after the removal")
			}
			at = w.tGone.Add(s.AfterGone)
		}
		if s.Cg {
			if !waitClosed(w.cg, time.Minute) {
				w.stop()
				return fail("the old pod's cgroup is still there a minute after the removal: %v", dirs)
			}
			if c := w.tCg.Add(s.AfterCg); c.After(at) {
				at = c
			}
		}
		time.Sleep(time.Until(at))
		w.written.Store(true)
		if r.Write, err = writeDurable(b.path, next); err != nil {
			w.stop()
			return fail("write: %v", err)
		}
	}
	err = w.wait(90 * time.Second)
	r.Gone, r.Cg, r.New, r.Active = w.tGone, w.tCg, w.tNew, w.tActive
	if err != nil {
		return fail("after the write: %v", err)
	}
	return r
}

func waitClosed(c chan struct{}, timeout time.Duration) bool {
	select {
	case <-c:
		return true
	case <-time.After(timeout):
		return false
	}
}

// saveRounds writes every round into
// <cache>/e2e/bench-kubelet-<kubelet>.json.
func saveRounds(t *testing.T, kubelet string, rs []roundResult) {
	t.Helper()
	cache, err := CacheDir()
	if err != nil {
		t.Error(err)
		return
	}
	p := filepath.Join(cache, "e2e", "bench-kubelet-"+kubelet+".json")
	b, _ := json.MarshalIndent(rs, "", "  ")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Error(err)
		return
	}
	t.Logf("every round: %s", p)
}
