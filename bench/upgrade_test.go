package bench

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// kubeletDelay is the test bed kubelet's start latency in BenchmarkUpgrade
// (testbed.Options.StartLatency): how long it takes from deciding to start
// a pod to the pod's process starting. A real kubelet takes about 0.47 s
// from a manifest write to the new process; 1 s here, so that the wait is
// long against the engine's fixed cost per step. (Before, the delay was
// the pod-worker hold of a replaced pod, StartDelay, which an upgrade that
// removes a manifest before writing the new one no longer meets.)
const kubeletDelay = time.Second

// benchRelease is the engine's wait for kubelet's release of a stopped
// pod's name on the test bed, which has no pod cgroups to watch: its
// kubelet stand-in releases a name 100 ms after the pod's last process
// (testbed.Options.Housekeeping).
const benchRelease = 300 * time.Millisecond

// upgrades is how many whole upgrades BenchmarkUpgrade runs (up, down, up,
// ...); STRATUM_BENCH_UPGRADES overrides it.
func upgrades() int {
	if v, err := strconv.Atoi(os.Getenv("STRATUM_BENCH_UPGRADES")); err == nil && v > 0 {
		return v
	}
	return 4
}

// BenchmarkUpgrade runs whole upgrades of a node with a VIP, every
// component but etcd changing (kube-apiserver, kube-controller-manager,
// kube-scheduler, kube-vip: four steps), under a kubelet stand-in that
// starts each new pod's process 1 s after deciding to start it, and
// reports:
//
//   - the ratio of the engine's time to kubelet's. The numerator is the
//     engine's wall time from the first manifest written (its "write"
//     event, after the write is durable) to the apply phase's last journal
//     write committed (the "verify" event): every wait, every scan, every
//     journal write and manifest write between the components. The
//     denominator is the sum over the components of kubelet's part: from
//     the component's "write" event to the moment the new process could
//     first be seen active: the component stand-in's "listen" event (its
//     listener open; it answers 200 from then on); for kube-vip, which has
//     no listener and is active once it runs, the kubelet stand-in's
//     record of starting its container (after the start latency, just
//     before the process is spawned); plus, for every component but the
//     first, its stop before its write ("stop" to "write": the manifest
//     removed, the old process gone, kubelet's release of the pod's name
//     awaited, engine/stop.go), which waits on kubelet too. The snapshot
//     (and the first component's stop) before and the soak after are in
//     neither.
//   - the CPU cost of waiting: this process's CPU time (getrusage
//     RUSAGE_SELF: the engine and an idle harness; the kubelet stand-in
//     and the components are other processes) over the wall time, summed
//     over every wait window, from a component's "wait-replaced" event to
//     its "done" event (WaitReplaced and WaitActive). The same over the
//     whole apply span is reported too, and the CPU time and wall time of
//     a wait window per step.
//   - journal commits per transaction;
//   - what this process burns idle (2 s before the upgrades), the floor of
//     the CPU measurement, and how many processes and threads the whole
//     machine created per second meanwhile (the waits are woken by every
//     exec on the machine, so a busy machine costs them more).
func BenchmarkUpgrade(b *testing.B) {
	r := newRig(b, testbed.Options{VIP: true, StartLatency: kubeletDelay}, engine.Deadlines{Replace: 60 * time.Second, Active: 60 * time.Second, Stop: 30 * time.Second, Soak: 50 * time.Millisecond, EtcdBackup: 20 * time.Second, Release: benchRelease})
	roster := manifest.NamesFor(r.n.State)
	// The harness idles while the engine waits: what this process burns
	// doing nothing is the floor of the measurement.
	c0, _ := cpuNow()
	t0 := time.Now()
	time.Sleep(2 * time.Second)
	c1, _ := cpuNow()
	idle := float64(c1-c0) / float64(time.Since(t0))
	forks0, ft0 := forks(), time.Now()
	var (
		engineWall, kubeletWall  time.Duration
		waitCPU, waitWall        time.Duration
		spanCPU                  time.Duration
		steps, commits, runs     int
		runWall, overheadPerStep time.Duration
		detect, between          time.Duration
	)
	for i := range upgrades() {
		tag, vipTag := testbed.KubeTags[(i+1)%2], testbed.KubeVIPTags[(i+1)%2]
		images := map[string]string{}
		for _, comp := range roster {
			switch comp {
			case nodestate.Etcd:
			case nodestate.KubeVIP:
				images[comp] = testbed.ModeImage(comp, vipTag, standin.ModeHealthy)
			default:
				images[comp] = testbed.ModeImage(comp, tag, standin.ModeHealthy)
			}
		}
		c0 := r.j.Commits()
		res, err := r.run(release(tag, images))
		if err != nil || res.Outcome != engine.Committed {
			b.Fatalf("upgrade %d: Run: %+v %v", i, res, err)
		}
		if len(res.Changed) != 4 {
			b.Fatalf("upgrade %d changed %v, want the four components but etcd", i, res.Changed)
		}
		commits += int(r.j.Commits() - c0)
		runs++
		runWall += res.Elapsed
		evs := r.events(res.Txn)
		sevs, err := r.n.Events()
		if err != nil {
			b.Fatal(err)
		}
		kevs, err := r.n.Kubelet.Events(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		first, ok := find(evs, "write", res.Changed[0])
		verify, ok2 := find(evs, "verify", "")
		if !ok || !ok2 {
			b.Fatalf("upgrade %d: engine events incomplete", i)
		}
		var kubelet time.Duration
		for _, comp := range res.Changed {
			write, ok1 := find(evs, "write", comp)
			wait, ok2 := find(evs, "wait-replaced", comp)
			done, ok3 := find(evs, "done", comp)
			if !ok1 || !ok2 || !ok3 {
				b.Fatalf("upgrade %d: engine events of %s incomplete", i, comp)
			}
			_, ps, err := r.doneRecord(res.Txn, comp)
			if err != nil {
				b.Fatal(err)
			}
			if len(ps) != 1 {
				b.Fatalf("upgrade %d: done record of %s names %d processes", i, comp, len(ps))
			}
			var ready time.Time
			if comp == nodestate.KubeVIP {
				ev, ok := kubeletStart(kevs, ps[0].PID, write.Time)
				if !ok {
					b.Fatalf("upgrade %d: the kubelet stand-in did not record starting %s pid %d", i, comp, ps[0].PID)
				}
				ready = ev
			} else {
				ev, ok := standinEvent(sevs, comp, ps[0].PID, standin.EventListen, write.Time, verify.Time)
				if !ok {
					b.Fatalf("upgrade %d: no listen event of %s pid %d", i, comp, ps[0].PID)
				}
				ready = ev.Time
			}
			kubelet += ready.Sub(write.Time)
			if stop, ok := find(evs, "stop", comp); ok && comp != res.Changed[0] {
				// The stop before the write (manifest removed, old process
				// gone, kubelet's release of the name awaited) is waiting
				// on kubelet too; the first one comes before the span.
				kubelet += write.Time.Sub(stop.Time)
			}
			detect += done.Time.Sub(ready)
			if j := slices.Index(res.Changed, comp); j+1 < len(res.Changed) {
				nw, ok := find(evs, "stop", res.Changed[j+1])
				if !ok {
					nw, _ = find(evs, "write", res.Changed[j+1])
				}
				between += nw.Time.Sub(done.Time)
			} else {
				between += verify.Time.Sub(done.Time)
			}
			waitCPU += done.CPU - wait.CPU
			waitWall += done.Time.Sub(wait.Time)
			steps++
		}
		span := verify.Time.Sub(first.Time)
		engineWall += span
		kubeletWall += kubelet
		spanCPU += verify.CPU - first.CPU
		overheadPerStep += (span - kubelet) / time.Duration(len(res.Changed))
	}
	b.ReportMetric(float64(forks()-forks0)/time.Since(ft0).Seconds(), "machine-forks/s")
	b.ReportMetric(100*idle, "idle-cpu-%")
	b.ReportMetric(float64(runs), "upgrades")
	b.ReportMetric(float64(steps), "steps")
	b.ReportMetric(float64(engineWall)/float64(kubeletWall), "engine/kubelet")
	b.ReportMetric(ms(engineWall)/float64(runs), "engine-ms/upgrade")
	b.ReportMetric(ms(kubeletWall)/float64(runs), "kubelet-ms/upgrade")
	b.ReportMetric(ms(overheadPerStep)/float64(runs), "overhead-ms/step")
	b.ReportMetric(ms(runWall)/float64(runs), "run-ms/upgrade")
	b.ReportMetric(ms(detect)/float64(steps), "detect-ms/step")
	b.ReportMetric(ms(between)/float64(steps), "between-ms/step")
	b.ReportMetric(100*float64(waitCPU)/float64(waitWall), "wait-cpu-%")
	b.ReportMetric(ms(waitCPU)/float64(steps), "wait-cpu-ms/step")
	b.ReportMetric(ms(waitWall)/float64(steps), "wait-ms/step")
	b.ReportMetric(100*float64(spanCPU)/float64(engineWall), "apply-cpu-%")
	b.ReportMetric(float64(commits)/float64(runs), "commits/upgrade")
}

// kubeletStart is the time the kubelet stand-in started process pid, after
// after.
func kubeletStart(evs []kubeletsim.Event, pid int, after time.Time) (time.Time, bool) {
	for _, ev := range evs {
		if ev.Kind == kubeletsim.EventStart && ev.PID == pid && !ev.Time.Before(after) {
			return ev.Time, true
		}
	}
	return time.Time{}, false
}

// forks is the number of processes and threads created on the machine
// since boot (the "processes" line of /proc/stat): how busy the rest of the
// machine is, which the exec events the waits are woken by depend on.
func forks() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "processes "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
