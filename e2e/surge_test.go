package e2e

// Surge under the real kubelet with the real control plane (issue 41):
// the upgrade with surge and with --no-surge side by side, and a rollback
// with surge, each under a client and a strict probe of the API; the
// control plane's memory during the surge; and kubelet's rules a surge
// copy relies on (no ports: it runs beside the canonical pod; the same
// host port: rejected).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// surged are the components a surge replaces.
var surged = []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}

// upgradedOnce starts the node as one that stratum has upgraded once runs
// (engine.Release.Apply): the three surgeable components with
// --permit-port-sharing=true and etcd with a 2 s stop grace.
func upgradedOnce(st *nodestate.NodeState) {
	for _, c := range surged {
		st.SetExtraArg(c, "permit-port-sharing", "true")
	}
	grace := int64(2)
	st.Etcd.TerminationGracePeriodSeconds = &grace
}

// surgeScenarios runs the surge scenarios and logs their figure lines
// together at the end, as make e2e-kubelet prints them.
func surgeScenarios(t *testing.T, h *Host, rep *kubeletRuns, imported func(*testing.T)) {
	var mu sync.Mutex
	var lines []string
	figure := func(t *testing.T, line string) {
		t.Log(line)
		mu.Lock()
		lines = append(lines, line)
		mu.Unlock()
	}
	defer func() { t.Logf("surge figures (load average %s):\n%s", loadAvg(), strings.Join(lines, "\n")) }()

	upgrade := func(t *testing.T, surge bool) {
		imported(t)
		n := resetNodeFrom(t, h, nodeSpec{stateFile: "testdata/states/real.yaml", real: true, mutate: upgradedOnce})
		api := n.apiClient(t)
		api.checkVersion(t, realFrom)
		rel := n.realRelease(t)
		o, label := runOpts{}, "surge"
		if !surge {
			o, label = runOpts{flags: []string{"--no-surge"}}, "stop-then-start"
		}
		rssBefore := startRSS(h)
		time.Sleep(2 * time.Second)
		before := rssBefore.finish()
		pods := watchPods(h)
		rss := startRSS(h)
		var r runResult
		client, strict := measureAvailability(t, n, api, func() { r = n.run(t, o, "run", "--to", rel) })
		peak := rss.finish()
		beside := pods.finish()
		logTimeline(t, r, client.Start)
		rep.add(t, fmt.Sprintf("real control plane %s upgrade (etcd 3.6.16 -> 3.7.3, kube-apiserver, -controller-manager, -scheduler %s -> %s, running with --permit-port-sharing), default deadlines", label, realFrom, realTo), r)
		figure(t, availability(label, client, strict))
		if surge {
			figure(t, fmt.Sprintf("surge memory: control plane peak RSS %d MiB during the upgrade, %d MiB before", peak, before))
		}
		if r.code != 0 {
			t.Fatalf("run exited %d, want 0:\n%s", r.code, r.output())
		}
		checkSurgeEvents(t, r, surge)
		checkConverged(t, n, engine.Committed, nil)
		checkNoSurgeCopy(t, h)
		api.checkVersion(t, realTo)
		for _, c := range surged {
			if surge && !beside[c] {
				t.Errorf("kubelet never ran %s's surge pod and its canonical pod at once", c)
			}
		}
		if surge {
			checkSurgeAvailability(t, r, client, strict, "upgrade")
		}
		if surge {
			checkHostPortRejected(t, h, nodestate.Scheduler)
		}
	}
	t.Run("real-surge-upgrade", func(t *testing.T) { upgrade(t, true) })
	t.Run("real-two-step", func(t *testing.T) { twoStepScenario(t, h, rep, imported, figure) })
	t.Run("real-stop-then-start-upgrade", func(t *testing.T) { upgrade(t, false) })

	t.Run("real-surge-rollback", func(t *testing.T) {
		imported(t)
		n := resetNodeFrom(t, h, nodeSpec{stateFile: "testdata/states/real.yaml", real: true, mutate: func(st *nodestate.NodeState) {
			upgradedOnce(st)
			st.ExtraArgs[nodestate.KubeAPIServer]["feature-gates"] = nodestate.ArgValues{removedGate + "=true"}
		}})
		api := n.apiClient(t)
		api.checkVersion(t, realFrom)
		before := n.manifests(t)
		rel := n.realRelease(t)
		var gateSeen chan string
		var r runResult
		client, strict := measureAvailability(t, n, api, func() {
			r = n.run(t, runOpts{flags: failingFlags, onEvent: func(ev engine.Event) {
				if gateSeen == nil && ev.Component == nodestate.KubeAPIServer && ev.Step == "wait-surge-active" {
					gateSeen = make(chan string, 1)
					go func() { gateSeen <- h.findPodLog(nodestate.KubeAPIServer, removedGateErr, 40*time.Second) }()
				}
			}}, "run", "--to", rel)
		})
		logTimeline(t, r, client.Start)
		rep.add(t, fmt.Sprintf("real control plane with surge: kube-apiserver %s's surge copy exits on --feature-gates=%s=true, rollback to %s (--active-timeout 45s)", realTo, removedGate, realFrom), r)
		figure(t, availability("surge rollback", client, strict))
		if r.code != 3 {
			t.Fatalf("run exited %d, want 3 (rolled back):\n%s", r.code, r.output())
		}
		if gateSeen == nil {
			t.Errorf("the engine never waited for kube-apiserver's surge copy to answer:\n%s", r.output())
		} else if line := <-gateSeen; line == "" {
			t.Errorf("kube-apiserver %s's surge copy never logged %q: it failed for another reason", realTo, removedGateErr)
		}
		checkConverged(t, n, engine.RolledBack, before)
		checkNoSurgeCopy(t, h)
		api.checkVersion(t, realFrom)
		checkSurgeAvailability(t, r, client, strict, "rollback")
	})
}

// checkSurgeAvailability checks what surge guarantees: kube-apiserver's
// port always had a listener, so neither the client nor the strict probe
// was ever refused a connection (stop-then-start is, for seconds). It then
// holds the client's failures against issue 41's target, 0 over the whole
// run, split between etcd's steps (stop-then-start: one data directory)
// and the rest, by cause. Not meeting that target is logged as such, with
// its causes, not failed on: they are in kube-apiserver's and etcd's own
// shutdown (docs/performance.md, "Surge under the real kubelet"), and their
// fixes are the product's to make, not this test's.
func checkSurgeAvailability(t *testing.T, r runResult, client, strict loadFigures, what string) {
	t.Helper()
	for _, f := range []loadFigures{client, strict} {
		for _, x := range f.Failures {
			if strings.Contains(x.err, "connection refused") {
				t.Errorf("a request sent at +%.1f s was refused over the surge %s: no kube-apiserver listened (%s)", x.at.Seconds(), what, x.err)
				break
			}
		}
	}
	windows := stepWindows(r, nodestate.Etcd)
	inEtcd := func(at time.Duration) bool {
		for _, w := range windows {
			if at >= w[0].Sub(client.Start) && at < w[1].Sub(client.Start) {
				return true
			}
		}
		return false
	}
	causes := map[string]int{}
	n := 0
	for _, x := range client.Failures {
		where := "outside etcd's steps"
		if inEtcd(x.at) {
			where = "in etcd's steps"
		}
		causes[where+": "+failureCause(x.err)]++
		n++
	}
	if n == 0 {
		t.Logf("issue 41's target met over the surge %s: no request (10 s timeout) failed", what)
		return
	}
	var lines []string
	for c, k := range causes {
		lines = append(lines, fmt.Sprintf("%d %s", k, c))
	}
	slices.Sort(lines)
	t.Logf("TARGET NOT MET (issue 41: 0 failed requests with the 10 s timeout) over the surge %s: %d failed:\n  %s", what, n, strings.Join(lines, "\n  "))
}

// failureCause is the kind of a failed request's error.
func failureCause(err string) string {
	switch {
	case strings.Contains(err, "context deadline exceeded"):
		return "no answer within the timeout"
	case strings.Contains(err, "connection refused"):
		return "connection refused"
	case strings.Contains(err, "EOF"), strings.Contains(err, "connection reset"):
		return "connection closed by the server (EOF or reset)"
	case strings.Contains(err, "shutting down"):
		return "503 apiserver is shutting down"
	}
	return err
}

// stepWindows are the stretches of comp's steps in r: from its first
// event of a phase to its done (or the run's end), one per phase.
func stepWindows(r runResult, comp string) [][2]time.Time {
	var out [][2]time.Time
	open := map[string]int{}
	for _, ev := range r.events {
		if ev.Component != comp || ev.Phase == "planned" {
			continue
		}
		i, ok := open[ev.Phase]
		if !ok {
			out = append(out, [2]time.Time{ev.Time, {}})
			i = len(out) - 1
			open[ev.Phase] = i
		}
		out[i][1] = ev.Time
	}
	return out
}

// checkSurgeEvents checks each surgeable component's step surged (a
// surge-write and a surge-remove, no no-surge) or, without surge, said
// why not.
func checkSurgeEvents(t *testing.T, r runResult, surge bool) {
	t.Helper()
	seen := map[string]map[string]bool{}
	for _, ev := range r.events {
		if seen[ev.Step] == nil {
			seen[ev.Step] = map[string]bool{}
		}
		seen[ev.Step][ev.Component] = true
	}
	for _, c := range surged {
		if surge && (!seen["surge-write"][c] || !seen["surge-remove"][c] || seen["no-surge"][c]) {
			t.Errorf("%s: surge-write %v, surge-remove %v, no-surge %v; want a surge", c, seen["surge-write"][c], seen["surge-remove"][c], seen["no-surge"][c])
		}
		if !surge && (!seen["no-surge"][c] || seen["surge-write"][c]) {
			t.Errorf("%s: no-surge %v, surge-write %v; want stop-then-start with --no-surge", c, seen["no-surge"][c], seen["surge-write"][c])
		}
	}
}

// checkNoSurgeCopy checks no surge file is in the manifest directory and
// kubelet runs no surge pod.
func checkNoSurgeCopy(t *testing.T, h *Host) {
	t.Helper()
	for _, c := range surged {
		if _, err := os.Stat(filepath.Join(h.ManifestDir, manifest.SurgeFileName(c))); err == nil {
			t.Errorf("%s is left in the manifest directory", manifest.SurgeFileName(c))
		}
	}
	if err := waitUntil(t.Context(), "kubelet to drop every surge pod", 60*time.Second, func() (bool, error) {
		ps, err := h.Pods(t.Context())
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(ps, func(p PodStatus) bool { return strings.Contains(p.Name, "-surge-") }), nil
	}); err != nil {
		t.Error(err)
	}
}

// podWatch polls kubelet's pods every 300 ms and records, per component,
// whether its surge pod and its canonical pod ever both had their
// container running at once.
type podWatch struct {
	stop, done chan struct{}
	both       map[string]bool
}

func watchPods(h *Host) *podWatch {
	w := &podWatch{stop: make(chan struct{}), done: make(chan struct{}), both: map[string]bool{}}
	running := func(p PodStatus) bool { return len(p.Containers) > 0 && p.Containers[0].Running }
	go func() {
		defer close(w.done)
		for {
			ps, _ := h.Pods(context.Background())
			for _, c := range surged {
				var canon, surge bool
				for _, p := range ps {
					switch p.Name {
					case c + "-" + h.NodeName:
						canon = canon || running(p)
					case manifest.SurgePodName(c) + "-" + h.NodeName:
						surge = surge || running(p)
					}
				}
				w.both[c] = w.both[c] || canon && surge
			}
			select {
			case <-w.stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *podWatch) finish() map[string]bool {
	close(w.stop)
	<-w.done
	return w.both
}

// checkHostPortRejected copies comp's canonical manifest under another pod
// name, keeping its ports, and checks kubelet rejects it for the host port
// the canonical pod holds (kubernetes#128845: why a surge copy declares
// none), then removes it.
func checkHostPortRejected(t *testing.T, h *Host, comp string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.ManifestDir, comp+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Containers) == 0 || len(pod.Spec.Containers[0].Ports) == 0 {
		t.Fatalf("%s's canonical manifest declares no port: nothing for a second pod to conflict with", comp)
	}
	// The rule the stand-ins apply (kubeletpod.PortConflicts) must say
	// what the real kubelet does: the surge copy of this manifest (which
	// it ran beside the canonical pod) conflicts with nothing, the copy
	// that keeps the ports conflicts.
	sb, err := manifest.SurgeBytes(comp, b)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := manifest.DecodePod(sb)
	if err != nil {
		t.Fatal(err)
	}
	if p := kubeletpod.PortConflicts(&pod, sp); p != nil {
		t.Errorf("kubeletpod.PortConflicts finds %v between %s's pod and its surge copy, which the real kubelet ran side by side", p, comp)
	}
	name := comp + "-hostport"
	dup := pod.DeepCopy()
	dup.Name = name
	if kubeletpod.PortConflicts(&pod, dup) == nil {
		t.Errorf("kubeletpod.PortConflicts finds no conflict between %s's pod and a copy declaring its ports", comp)
	}
	out, err := yaml.Marshal(dup)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(h.ManifestDir, name+".yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(file)
	var got PodStatus
	err = waitUntil(t.Context(), "kubelet to reject "+name, 60*time.Second, func() (bool, error) {
		ps, err := h.Pods(t.Context())
		if err != nil {
			return false, err
		}
		for _, p := range ps {
			if p.Name == name+"-"+h.NodeName {
				got = p
				return p.Phase == "Failed" || slices.ContainsFunc(p.Containers, func(c ContainerStatus) bool { return c.Running }), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (last seen %+v)", err, got)
	}
	if got.Phase != "Failed" || got.Reason != "NodePorts" {
		t.Fatalf("kubelet ran a second %s pod declaring the canonical pod's host port: %+v, want it rejected (NodePorts)", comp, got)
	}
	t.Logf("kubelet rejected a second %s pod declaring the same host port: %s: %s", comp, got.Reason, got.Message)
}

// loadAvg is /proc/loadavg's three averages.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:min(3, len(strings.Fields(string(b))))], " ")
}
