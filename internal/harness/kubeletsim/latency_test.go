package kubeletsim

import (
	"slices"
	"testing"
	"time"
)

// The rule of Config.StartLatency: a pod whose start is decided runs its
// processes only StartLatency later, as a real kubelet creates the sandbox
// and the containers first (about 0.47 s from a manifest write to the new
// process). Meanwhile the pod is waiting (ContainerCreating) with no
// process; a pod killed meanwhile never starts one.

const testLatency = 300 * time.Millisecond

func latencyBed(t *testing.T) *bed {
	return newBed(t, func(c *Config) { c.StartLatency = testLatency })
}

func TestStartLatencyDelaysTheFirstStart(t *testing.T) {
	b := latencyBed(t)
	written := time.Now()
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	// Seen within the latency: the pod is decided, its container waits.
	st := b.waitFor("the pod decided", func(st []PodStatus) bool { return len(Find(st, key("kube-scheduler"))) == 1 })
	p := Find(st, key("kube-scheduler"))[0]
	if since := time.Since(written); since < testLatency && (p.State != StateWaiting || p.PID != 0 || p.Containers[0].Reason != "ContainerCreating") {
		t.Fatalf("%s after the write: pod %+v, want waiting (ContainerCreating) with no process", since, p)
	}
	run := b.waitRunning(key("kube-scheduler"), nil)
	starts := b.starts(key("kube-scheduler"))
	if len(starts) != 1 || starts[0].PID != run.PID {
		t.Fatalf("start events %+v, want one, of pid %d", starts, run.PID)
	}
	if d := starts[0].Time.Sub(written); d < testLatency {
		t.Fatalf("process started %s after the write, want at least the start latency %s", d, testLatency)
	}
}

func TestStartLatencyAfterAHeldReplacement(t *testing.T) {
	b := latencyBed(t)
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	old := b.waitRunning(key("kube-scheduler"), nil)
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler", annotations: map[string]string{"v": "2"}}))
	nw := b.waitRunning(key("kube-scheduler"), func(p PodStatus) bool { return p.UID != old.UID })
	h := b.k.History()
	term := slices.IndexFunc(h, func(e Event) bool { return e.Kind == EventTerminated && e.UID == old.UID })
	start := slices.IndexFunc(h, func(e Event) bool { return e.Kind == EventStart && e.UID == nw.UID })
	if term < 0 || start < 0 || start < term {
		t.Fatalf("events terminated(old)=%d start(new)=%d in %+v: want the old pod terminated before the new one starts", term, start, h)
	}
	// The name is free only after housekeeping; the latency comes on top.
	if d := h[start].Time.Sub(h[term].Time); d < testConfig().Housekeeping+testLatency {
		t.Fatalf("new process started %s after the old pod terminated, want at least housekeeping %s plus the latency %s",
			d, testConfig().Housekeeping, testLatency)
	}
}

func TestStartLatencyKilledPodNeverStarts(t *testing.T) {
	b := latencyBed(t)
	b.writeAtomic("kube-scheduler.yaml", podYAML(podOpts{name: "kube-scheduler"}))
	b.waitFor("the pod decided", func(st []PodStatus) bool { return len(Find(st, key("kube-scheduler"))) == 1 })
	b.remove("kube-scheduler.yaml")
	b.waitGone(key("kube-scheduler"))
	time.Sleep(testLatency + 100*time.Millisecond)
	if s := b.starts(key("kube-scheduler")); len(s) != 0 {
		t.Fatalf("a pod removed within its start latency started a process: %+v", s)
	}
	if r := b.records(); len(r) != 0 {
		t.Fatalf("container program ran: %+v", r)
	}
}
