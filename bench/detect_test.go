package bench

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/stats"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// replacements is how many kube-scheduler replacements BenchmarkDetection
// measures; STRATUM_BENCH_REPLACEMENTS overrides it (at least 50).
func replacements() int {
	if v, err := strconv.Atoi(os.Getenv("STRATUM_BENCH_REPLACEMENTS")); err == nil && v >= 50 {
		return v
	}
	return 100
}

// detectLatency is the test bed kubelet's start latency in
// BenchmarkDetection (testbed.Options.StartLatency): a tenth of
// BenchmarkUpgrade's, so that a wait is short and its fixed cost shows.
const detectLatency = 100 * time.Millisecond

// BenchmarkDetection measures how long the engine takes to notice that
// kubelet has done its part. It runs one-component upgrades through the
// public engine API (Run with a release that changes only kube-scheduler,
// alternating between the v1.34.5 and v1.34.4 images) on a test bed node
// with the test bed's scaled-down kubelet and a start latency of
// detectLatency, and for each replacement takes:
//
//   - healthy: the stand-in's "healthy" event of the new process, the moment
//     it wrote its first 200 to a health request;
//   - listen: the stand-in's "listen" event of the new process, the moment
//     its listener was open (from then on every request gets 200: the
//     earliest moment the process could have been seen healthy);
//   - record: the done record's Time, which the journal stamps when the
//     write carrying it begins (the engine has seen the process active and
//     journaled its identity; the fsyncs follow);
//   - durable: the moment that write had committed (fsynced). For the last
//     (here: only) component it also moves the transaction to verifying,
//     and the engine emits its "verify" event right after it returns; the
//     event's time is used.
//
// It reports p50, p99 and max of record - healthy (the definition of the
// issue), record - listen and durable - listen, and the CPU cost of the
// waits as BenchmarkUpgrade measures it (here with a kubelet that starts a
// pod's process 100 ms after deciding to, so the fixed cost of each wait
// weighs ten times more).
//
// The new process is the one the done record names.
func BenchmarkDetection(b *testing.B) {
	r := newRig(b, testbed.Options{StartLatency: detectLatency}, engine.Deadlines{Replace: 30 * time.Second, Active: 30 * time.Second, Stop: 15 * time.Second, Soak: 50 * time.Millisecond, EtcdBackup: 20 * time.Second, Release: benchRelease})
	const comp = nodestate.Scheduler
	type sample struct {
		txn      string
		pid      int
		write    time.Time
		record   time.Time
		durable  time.Time
		waitCPU  time.Duration
		waitWall time.Duration
		// CPU of the two waits apart: WaitReplaced (wait-replaced to
		// wait-active) and WaitActive (wait-active to done).
		replacedCPU, activeCPU time.Duration
		// Context switches of the two waits.
		replacedSw, activeSw int64
		// active is when WaitActive began (the wait-active event), done
		// when it returned (the done event).
		active, done time.Time
	}
	var samples []sample
	version := r.n.State.KubernetesVersion
	n := replacements()
	for i := range n {
		tag := testbed.KubeTags[(i+1)%len(testbed.KubeTags)]
		v := version
		if comp == nodestate.KubeAPIServer {
			v = tag // the control plane's version is kube-apiserver's
		}
		rel := release(v, map[string]string{comp: testbed.ModeImage(comp, tag, standin.ModeHealthy)})
		res, err := r.run(rel)
		if err != nil || res.Outcome != engine.Committed {
			b.Fatalf("replacement %d: Run: %+v %v", i, res, err)
		}
		if !slices.Equal(res.Changed, []string{comp}) {
			b.Fatalf("replacement %d changed %v, want only %s", i, res.Changed, comp)
		}
		rec, ps, err := r.doneRecord(res.Txn, comp)
		if err != nil {
			b.Fatal(err)
		}
		if len(ps) != 1 {
			b.Fatalf("replacement %d: done record names %d processes, want 1", i, len(ps))
		}
		evs := r.events(res.Txn)
		write, ok1 := find(evs, "write", comp)
		waitStart, ok2 := find(evs, "wait-replaced", comp)
		done, ok3 := find(evs, "done", comp)
		verify, ok4 := find(evs, "verify", "")
		active, ok5 := find(evs, "wait-active", comp)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			b.Fatalf("replacement %d: engine events incomplete: %+v", i, evs)
		}
		samples = append(samples, sample{txn: res.Txn, pid: ps[0].PID, write: write.Time, record: rec.Time, durable: verify.Time,
			waitCPU: done.CPU - waitStart.CPU, waitWall: done.Time.Sub(waitStart.Time),
			replacedCPU: active.CPU - waitStart.CPU, activeCPU: done.CPU - active.CPU,
			replacedSw: active.Switches - waitStart.Switches, activeSw: done.Switches - active.Switches,
			active: active.Time, done: done.Time})
	}
	evs, err := r.n.Events()
	if err != nil {
		b.Fatal(err)
	}
	var healthyRec, listenRec, listenDur, activeListen []time.Duration
	var activeWall time.Duration
	var cpu, wall, replacedCPU, activeCPU time.Duration
	var replacedSw, activeSw int64
	for i, s := range samples {
		h, ok := standinEvent(evs, comp, s.pid, standin.EventHealthy, s.write, s.durable)
		l, ok2 := standinEvent(evs, comp, s.pid, standin.EventListen, s.write, s.durable)
		if !ok || !ok2 {
			b.Fatalf("replacement %d: no stand-in healthy/listen event of pid %d between the write and the done record", i, s.pid)
		}
		healthyRec = append(healthyRec, s.record.Sub(h.Time))
		listenRec = append(listenRec, s.record.Sub(l.Time))
		listenDur = append(listenDur, s.durable.Sub(l.Time))
		activeListen = append(activeListen, l.Time.Sub(s.active))
		activeWall += s.done.Sub(s.active)
		cpu += s.waitCPU
		replacedCPU += s.replacedCPU
		activeCPU += s.activeCPU
		replacedSw += s.replacedSw
		activeSw += s.activeSw
		wall += s.waitWall
	}
	b.ReportMetric(float64(len(samples)), "replacements")
	report := func(name string, ds []time.Duration) {
		b.ReportMetric(ms(stats.Quantile(ds, 0.5)), name+"-p50-ms")
		b.ReportMetric(ms(stats.Quantile(ds, 0.99)), name+"-p99-ms")
		b.ReportMetric(ms(stats.Quantile(ds, 1)), name+"-max-ms")
	}
	report("healthy-record", healthyRec)
	report("listen-record", listenRec)
	report("listen-durable", listenDur)
	b.ReportMetric(100*float64(cpu)/float64(wall), "wait-cpu-%")
	b.ReportMetric(ms(cpu)/float64(len(samples)), "wait-cpu-ms/step")
	b.ReportMetric(ms(wall)/float64(len(samples)), "wait-ms/step")
	b.ReportMetric(ms(replacedCPU)/float64(len(samples)), "replaced-cpu-ms/step")
	b.ReportMetric(ms(activeCPU)/float64(len(samples)), "active-cpu-ms/step")
	b.ReportMetric(float64(replacedSw)/float64(len(samples)), "replaced-switches/step")
	b.ReportMetric(float64(activeSw)/float64(len(samples)), "active-switches/step")
	// How long WaitActive waited, and how long after it began the
	// listener opened: the time WaitActive paces refused connections over.
	b.ReportMetric(ms(activeWall)/float64(len(samples)), "active-ms/step")
	b.ReportMetric(ms(stats.Quantile(activeListen, 0.5)), "active-listen-p50-ms")
	b.ReportMetric(ms(stats.Quantile(activeListen, 1)), "active-listen-max-ms")
}
