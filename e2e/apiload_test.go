package e2e

// The API's availability through an upgrade (issue 41): a client that
// every 100 ms GETs and patches a ConfigMap through the node's
// kube-apiserver, each request on a new connection, and the control
// plane's resident memory sampled meanwhile.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// loadInterval is how often an apiLoad sends its GET and its write.
const loadInterval = 100 * time.Millisecond

// apiLoad sends, every loadInterval, a GET of its ConfigMap and a merge
// patch of it, each with its own timeout and on a new TLS connection (a
// client that reconnects sees what a new client sees: which listener the
// kernel hands the connection to). A request fails on any error, timeout
// or status other than 200.
type apiLoad struct {
	url, cm string
	timeout time.Duration
	client  *http.Client
	stop    chan struct{}
	done    sync.WaitGroup

	mu      sync.Mutex
	n       int
	failed  []loadFailure
	longest time.Duration
	ticks   []loadTick
	start   time.Time
}

// loadFailure is one failed request: when it was sent, how long it took,
// and its error with the URL cut out (so that equal ones group).
type loadFailure struct {
	at, took time.Duration
	err      string
}

// loadTick is one round: when it was sent and whether both its requests
// were answered.
type loadTick struct {
	at time.Duration
	ok bool
}

// startAPILoad creates ConfigMap kube-system/cm and starts sending to it.
func startAPILoad(t *testing.T, n *node, api apiClient, cm string, timeout time.Duration) *apiLoad {
	t.Helper()
	api.createConfigMap(t, cm, "0")
	c, err := (&testbed.Node{State: n.st}).AdminClient()
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Transport.(*http.Transport)
	tr.DisableKeepAlives = true
	l := &apiLoad{url: (&testbed.Node{State: n.st}).APIServerURL() + "/api/v1/namespaces/kube-system/configmaps/" + cm,
		cm: cm, timeout: timeout, client: &http.Client{Transport: tr}, stop: make(chan struct{}), start: time.Now()}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		tk := time.NewTicker(loadInterval)
		defer tk.Stop()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		for i := 1; ; i++ {
			select {
			case <-l.stop:
				return
			case <-tk.C:
			}
			inflight.Add(1)
			go func() { defer inflight.Done(); l.round(i) }()
		}
	}()
	return l
}

// round sends one GET and one patch, concurrently, and records them.
func (l *apiLoad) round(i int) {
	at := time.Since(l.start)
	patch := []byte(`{"data":{"value":"` + strconv.Itoa(i) + `"}}`)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	took := make([]time.Duration, 2)
	for k, r := range []struct {
		method, ctype string
		body          []byte
	}{{http.MethodGet, "", nil}, {http.MethodPatch, "application/merge-patch+json", patch}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			errs[k] = l.send(r.method, r.ctype, r.body)
			took[k] = time.Since(s)
		}()
	}
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := true
	for k, err := range errs {
		l.n++
		l.longest = max(l.longest, took[k])
		if err != nil {
			ok = false
			l.failed = append(l.failed, loadFailure{at: at, took: took[k], err: strings.ReplaceAll(err.Error(), `"`+l.url+`"`, "")})
		}
	}
	l.ticks = append(l.ticks, loadTick{at: at, ok: ok})
}

func (l *apiLoad) send(method, ctype string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, l.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", method, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// loadFigures are what an apiLoad measured.
type loadFigures struct {
	N, Failed int
	Longest   time.Duration
	// Unanswered is the time the load went without an answer: from the
	// first round of each run of failed rounds to the next round both
	// of whose requests were answered, summed; LongestGap is the longest
	// such run.
	Unanswered, LongestGap time.Duration
	Failures               []loadFailure
	// Start is when the load began: the failures' times count from it.
	Start time.Time
}

// failureRuns groups the failures into runs of one error, each sent less
// than 1 s after the previous one of that error, one line each, in order
// of their first: "+0.2..+1.3 s, 12 x (10.0 s at most): PATCH: ...".
func (f loadFigures) failureRuns() []string {
	fs := slices.Clone(f.Failures)
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].err != fs[j].err {
			return fs[i].err < fs[j].err
		}
		return fs[i].at < fs[j].at
	})
	type run struct {
		from time.Duration
		line string
	}
	var runs []run
	for i := 0; i < len(fs); {
		j, longest := i+1, fs[i].took
		for ; j < len(fs) && fs[j].err == fs[i].err && fs[j].at-fs[j-1].at < time.Second; j++ {
			longest = max(longest, fs[j].took)
		}
		runs = append(runs, run{fs[i].at, fmt.Sprintf("+%.1f..+%.1f s, %d x (%.1f s at most): %s", fs[i].at.Seconds(), fs[j-1].at.Seconds(), j-i, longest.Seconds(), fs[i].err)})
		i = j
	}
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].from < runs[j].from })
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.line
	}
	return out
}

// finish stops the load, waits for the requests in flight and returns its
// figures.
func (l *apiLoad) finish() loadFigures {
	close(l.stop)
	l.done.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	ticks := append([]loadTick(nil), l.ticks...)
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].at < ticks[j].at })
	f := loadFigures{N: l.n, Failed: len(l.failed), Longest: l.longest, Failures: l.failed, Start: l.start}
	var from time.Duration = -1
	end := func(to time.Duration) {
		if from >= 0 {
			gap := to - from
			f.Unanswered += gap
			f.LongestGap = max(f.LongestGap, gap)
			from = -1
		}
	}
	for _, tk := range ticks {
		switch {
		case !tk.ok && from < 0:
			from = tk.at
		case tk.ok:
			end(tk.at)
		}
	}
	if len(ticks) > 0 {
		end(ticks[len(ticks)-1].at + loadInterval)
	}
	return f
}

// availability is a scenario's figure line (issue 41's wording): the
// client's failures and longest request, and the strict probe's time
// unanswered.
func availability(label string, client, strict loadFigures) string {
	return fmt.Sprintf("%s: requests failed %d of %d (10 s timeout), longest request %.1f s, strict probe unanswered %.1f s",
		label, client.Failed, client.N, client.Longest.Seconds(), strict.Unanswered.Seconds())
}

// measureAvailability starts the client (10 s timeout) and the strict
// probe (1 s), each on its own ConfigMap, runs f, and returns both
// figures, logging the first failures of each.
func measureAvailability(t *testing.T, n *node, api apiClient, f func()) (client, strict loadFigures) {
	t.Helper()
	return measureAvailabilityAs(t, n, api, "", f)
}

// measureAvailabilityAs is measureAvailability with suffix on the
// ConfigMaps' names: a second measurement on the same node.
func measureAvailabilityAs(t *testing.T, n *node, api apiClient, suffix string, f func()) (client, strict loadFigures) {
	t.Helper()
	c := startAPILoad(t, n, api, "stratum-e2e-client"+suffix, 10*time.Second)
	s := startAPILoad(t, n, api, "stratum-e2e-strict"+suffix, time.Second)
	f()
	client, strict = c.finish(), s.finish()
	for _, x := range []struct {
		name string
		f    loadFigures
	}{{"client (10 s)", client}, {"strict probe (1 s)", strict}} {
		t.Logf("%s: %d of %d failed, unanswered %.1f s in all, %.1f s at most at once", x.name, x.f.Failed, x.f.N, x.f.Unanswered.Seconds(), x.f.LongestGap.Seconds())
		if runs := x.f.failureRuns(); len(runs) > 0 {
			t.Logf("%s failures, from the load's start:\n  %s", x.name, strings.Join(runs[:min(40, len(runs))], "\n  "))
		}
	}
	return client, strict
}

// rssSampler sums the VmRSS of the control plane's processes on the Host
// (etcd, kube-apiserver, -controller-manager, -scheduler, surge copies
// included: every process of those names in the Host's containers) every
// 250 ms and keeps the peak.
type rssSampler struct {
	h    *Host
	stop chan struct{}
	done chan struct{}
	peak uint64
}

func startRSS(h *Host) *rssSampler {
	s := &rssSampler{h: h, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			if v := controlPlaneRSS(h); v > s.peak {
				s.peak = v
			}
			select {
			case <-s.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return s
}

// finish stops the sampling and returns the peak in MiB.
func (s *rssSampler) finish() uint64 {
	close(s.stop)
	<-s.done
	return s.peak >> 20
}

// controlPlaneRSS is the summed VmRSS, in bytes, of the component
// processes in the Host's containers now.
func controlPlaneRSS(h *Host) uint64 {
	var sum uint64
	for _, name := range componentNames {
		ps, err := h.ComponentPIDs(name)
		if err != nil {
			continue
		}
		for _, p := range ps {
			sum += vmRSS(p.PID)
		}
	}
	return sum
}

// vmRSS is pid's VmRSS in bytes, 0 when it is gone.
func vmRSS(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// logTimeline logs the run's events from start (the load's), so that a
// failure's time reads against the step it fell in.
func logTimeline(t *testing.T, r runResult, start time.Time) {
	t.Helper()
	var b strings.Builder
	for _, ev := range r.events {
		if ev.Component == "" && ev.Step != "commit" && ev.Step != "rollback" && ev.Step != "rolled-back" {
			continue
		}
		fmt.Fprintf(&b, "\n  +%6.1f s  %-12s %-24s %s", ev.Time.Sub(start).Seconds(), ev.Phase, ev.Component, ev.Step)
	}
	t.Logf("events, from the load's start:%s", b.String())
}
