package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// failingFlags bound the wait that detects a component that never becomes
// healthy. That wait is exactly --active-timeout, so the default (3m) would
// only make a failing scenario 3m slower without testing anything more;
// every committing scenario runs with the default deadlines.
var failingFlags = []string{"--active-timeout", "45s"}

// TestRealKubelet drives stratum-upgrade through every scenario of
// docs/e2e.md on one containerd and kubelet, each scenario on a fresh node
// (manifests removed, pods gone, new PKI, data and journal, init): every
// scenario under the newest of Kubelets, the upgrade, rollback and
// kill-resume scenarios under each older one too; a kubelet that KUBELET
// selects runs every scenario.
func TestRealKubelet(t *testing.T) {
	requireE2E(t)
	ks, selected, err := kubeletsFor()
	if err != nil {
		t.Fatal(err)
	}
	rep := &report{Deadlines: fmt.Sprintf("%+v", engine.DefaultDeadlines)}
	t.Cleanup(func() { rep.write(t) })
	for _, k := range ks {
		rep.Kubelets = append(rep.Kubelets, k.Version)
		full := selected || k.Version == Kubelets[0].Version
		t.Run(k.Version, func(t *testing.T) { realKubelet(t, k, full, &kubeletRuns{rep: rep, kubelet: k.Version}) })
	}
}

// realKubelet runs the scenarios under kubelet k: every one when full,
// otherwise those marked for every kubelet.
func realKubelet(t *testing.T, k Kubelet, full bool, rep *kubeletRuns) {
	h := startHost(t, k)
	scenario := func(name string, everyKubelet bool, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			if !full && !everyKubelet {
				t.Skipf("runs under kubelet %s only (%s=%s runs it under this one)", Kubelets[0].Version, EnvKubelet, k.Version)
			}
			f(t)
		})
	}

	scenario("commit-with-etcd-minor-upgrade", true, func(t *testing.T) {
		n := resetNode(t, h)
		etcdclient.Put(t, n, "before", "1")
		rel := n.writeRelease(t, "v1.34.5-etcd36", true, "", "")
		r := n.run(t, runOpts{}, "run", "--to", rel)
		rep.add(t, "commit (etcd 3.5.35 -> 3.6.16, 3 stand-ins v1.34.4 -> v1.34.5), default deadlines", r)
		if r.code != 0 {
			t.Fatalf("run exited %d, want 0:\n%s", r.code, r.output())
		}
		checkConverged(t, n, engine.Committed, nil)
		if v := etcdclient.Version(t, n); !strings.HasPrefix(v, "3.6.") {
			t.Errorf("etcd serves %s after the upgrade, want 3.6", v)
		}
		if got := etcdclient.Get(t, n, "before"); got != "1" {
			t.Errorf("key written before the upgrade reads %q after it", got)
		}
	})

	scenario("scheduler-crashes-in-soak-rolls-back", true, func(t *testing.T) {
		n := resetNode(t, h)
		before := n.manifests(t)
		// Healthy at once, so its step passes; exits 1 two seconds later
		// (STANDIN_CRASH_AFTER's default) and kubelet restarts it: only
		// the soak can see that. Default deadlines.
		rel := n.saveRelease(t, "v1.34.5-scheduler-crash-after", engine.Release{
			// kube-apiserver stays at the node's v1.34.4: so does the
			// control plane's version.
			APIVersion: engine.ReleaseAPIVersion, Kind: engine.ReleaseKind, KubernetesVersion: "v1.34.4",
			Images: map[string]string{nodestate.Scheduler: testbed.ModeImage(nodestate.Scheduler, "v1.34.5", standin.ModeCrashAfter)},
		})
		r := n.run(t, runOpts{}, "run", "--to", rel)
		rep.add(t, "scheduler healthy then crashing 2 s later: the soak rolls back (default deadlines)", r)
		if r.code != 3 {
			t.Fatalf("run exited %d, want 3 (rolled back):\n%s", r.code, r.output())
		}
		if !strings.Contains(r.stdout, "soak") && !strings.Contains(r.stderr, "soak") {
			t.Logf("no mention of the soak in the output:\n%s", r.output())
		}
		checkConverged(t, n, engine.RolledBack, before)
	})

	crashes := []struct {
		name, fault string
		etcd36      bool
		fail        string
		want        engine.Outcome
		every       bool // runs under every kubelet
	}{
		{"sigkill-after-write-etcd", "after-write:etcd", true, "", engine.Committed, false},
		{"sigkill-after-replaced-kube-apiserver", "after-replaced:kube-apiserver", false, "", engine.Committed, true},
		{"sigkill-rollback-after-write-kube-scheduler", "rollback-after-write:kube-scheduler", true, nodestate.Scheduler, engine.RolledBack, false},
	}
	for _, c := range crashes {
		scenario(c.name, c.every, func(t *testing.T) {
			n := resetNode(t, h)
			etcdclient.Put(t, n, "before", "1")
			before := n.manifests(t)
			rel := n.writeRelease(t, "release", c.etcd36, c.fail, standin.ModeNeverListen)
			var flags []string
			if c.fail != "" {
				flags = failingFlags
			}
			o := runOpts{fault: c.fault, flags: flags}
			if c.want == engine.RolledBack && c.etcd36 {
				// Once etcd 3.6 runs, write to it: the rollback downgrades
				// the data with etcd's protocol (issue 30), so that write
				// must survive.
				o.onEvent = func(ev engine.Event) {
					if ev.Phase == "applying" && ev.Step == "done" && ev.Component == nodestate.Etcd {
						etcdclient.Put(t, n, "during", "2")
					}
				}
			}
			r := n.run(t, o, "run", "--to", rel)
			rep.add(t, "killed at "+c.fault, r)
			if r.code != -1 {
				t.Fatalf("run was not killed at %s (exit %d):\n%s", c.fault, r.code, r.output())
			}
			wantCode := 0
			if c.want == engine.RolledBack {
				wantCode = 3
			}
			r = n.run(t, runOpts{flags: flags}, "resume")
			rep.add(t, "resume after the kill at "+c.fault, r)
			if r.code != wantCode {
				t.Fatalf("resume exited %d, want %d:\n%s", r.code, wantCode, r.output())
			}
			checkConverged(t, n, c.want, before)
			if got := etcdclient.Get(t, n, "before"); got != "1" {
				t.Errorf("key written before the upgrade reads %q after it", got)
			}
			if c.etcd36 {
				want := "3.6."
				if c.want == engine.RolledBack {
					want = "3.5."
				}
				if v := etcdclient.Version(t, n); !strings.HasPrefix(v, want) {
					t.Errorf("etcd serves %s, want %sx", v, want)
				}
				if got := etcdclient.Get(t, n, "during"); c.want == engine.RolledBack && got != "2" {
					t.Errorf("key written to etcd 3.6 during the upgrade reads %q after the rollback, want it kept by etcd's downgrade", got)
				}
			}
		})
	}

	scenario("kubelet-restarted-mid-upgrade", false, func(t *testing.T) {
		n := resetNode(t, h)
		rel := n.writeRelease(t, "release", false, "", "")
		restarted := make(chan error, 1)
		fired := false
		r := n.run(t, runOpts{onEvent: func(ev engine.Event) {
			if fired || ev.Step != "wait-replaced" || ev.Component != nodestate.ControllerManager {
				return
			}
			fired = true
			// kill kubelet while the engine waits on it, start it again
			// a few seconds later, while the run goes on waiting
			go func() {
				if err := h.KillKubelet(); err != nil {
					restarted <- err
					return
				}
				t.Logf("kubelet killed while the engine waits for it to replace %s", ev.Component)
				time.Sleep(5 * time.Second)
				restarted <- h.StartKubelet(context.Background())
			}()
		}}, "run", "--to", rel)
		rep.add(t, "kubelet SIGKILLed while the engine waits on kube-controller-manager, restarted 5 s later", r)
		if !fired {
			t.Fatalf("the run never waited on kube-controller-manager:\n%s", r.output())
		}
		if err := <-restarted; err != nil {
			t.Fatal(err)
		}
		if r.code != 0 {
			t.Logf("run exited %d; resuming:\n%s", r.code, r.output())
			rr := n.run(t, runOpts{}, "resume")
			rep.add(t, "resume after the kubelet restart", rr)
			if rr.code != 0 {
				t.Fatalf("resume exited %d:\n%s", rr.code, rr.output())
			}
		}
		checkConverged(t, n, engine.Committed, nil)
	})

	scenario("real-control-plane", false, func(t *testing.T) { realScenarios(t, h, rep) })
}

// report is what the end-to-end run measured.
type report struct {
	// Kubelets are the kubelet versions the run ran under.
	Kubelets  []string   `json:"kubelets"`
	Deadlines string     `json:"defaultDeadlines"`
	Runs      []runTimes `json:"runs"`
}

// kubeletRuns adds the runs under one kubelet to the report.
type kubeletRuns struct {
	rep     *report
	kubelet string
}

type runTimes struct {
	Test string `json:"test"`
	// Kubelet is the version of the kubelet the run ran under.
	Kubelet   string      `json:"kubelet"`
	What      string      `json:"what"`
	ExitCode  int         `json:"exitCode"`
	Outcome   string      `json:"outcome,omitempty"`
	Total     string      `json:"total"`
	TotalSecs float64     `json:"totalSeconds"`
	Steps     []stepTimes `json:"steps"`
	// Spans are the other timed stretches, in seconds: "snapshot" (begin
	// to the first manifest write, etcd's backup included), "etcd-backup",
	// "etcd-stop" (manifest removed to etcd gone, in a rollback),
	// "soak-caught" (the soak's start to the rollback it started),
	// "rollback" (the failure to rolled-back) and "verify" (the last soak's
	// start to the commit or rolled-back).
	Spans   map[string]float64 `json:"spans,omitempty"`
	Foreign []string           `json:"interference,omitempty"`
}

// stepTimes is one component step: its stop (manifest removed -> old
// process gone and kubelet's release of the pod's name awaited), then
// manifest written -> a new process running (replaced) -> the new one
// answering (active). Total is write -> active; Downtime is stop ->
// active, how long the component was down; a step that surged (Surged:
// surge copy written -> its pod answered, before the write) was never
// down, since the old instance served until the copy answered. A step
// that failed has Failed set and Active is how long it waited.
type stepTimes struct {
	Phase     string  `json:"phase"`
	Component string  `json:"component"`
	Stop      float64 `json:"stopSeconds"`
	Replaced  float64 `json:"replacedSeconds"`
	Active    float64 `json:"activeSeconds"`
	Total     float64 `json:"totalSeconds"`
	Downtime  float64 `json:"downtimeSeconds"`
	Surged    float64 `json:"surgedSeconds,omitempty"`
	Failed    bool    `json:"failed,omitempty"`
}

func (kr *kubeletRuns) add(t *testing.T, what string, r runResult) {
	rt := runTimes{Test: t.Name(), Kubelet: kr.kubelet, What: what, ExitCode: r.code, Total: r.elapsed.Round(10 * time.Millisecond).String(), TotalSecs: r.elapsed.Seconds(), Foreign: r.foreign, Spans: map[string]float64{}}
	if r.final != nil {
		rt.Outcome, _ = r.final["outcome"].(string)
	}
	type key struct{ phase, comp string }
	write, replaced, stop, surge := map[key]time.Time{}, map[key]time.Time{}, map[key]time.Time{}, map[key]time.Time{}
	at := map[string]time.Time{}
	var open *key
	var lastVerify time.Time
	span := func(name, from string, to time.Time) {
		if f, ok := at[from]; ok {
			rt.Spans[name] = to.Sub(f).Seconds()
		}
	}
	for i, ev := range r.events {
		k := key{ev.Phase, ev.Component}
		if _, seen := at[ev.Step]; !seen {
			at[ev.Step] = ev.Time
		}
		if i > 0 && r.events[i-1].Step == "etcd-backup" {
			span("etcd-backup", "etcd-backup", ev.Time)
		}
		switch ev.Step {
		case "stop":
			stop[k] = ev.Time
		case "surge-write":
			surge[k] = ev.Time
		case "write":
			if _, ok := rt.Spans["snapshot"]; !ok && ev.Phase != "rolling-back" {
				if len(r.events) > 0 && r.events[0].Step == "begin" {
					rt.Spans["snapshot"] = ev.Time.Sub(r.events[0].Time).Seconds()
				}
			}
			write[k] = ev.Time
			delete(replaced, k)
			open = &k
		case "wait-active":
			replaced[k] = ev.Time
		case "done":
			w, ok := write[k]
			if !ok || ev.Component == "" {
				continue
			}
			s := stepTimes{Phase: ev.Phase, Component: ev.Component, Total: ev.Time.Sub(w).Seconds(), Downtime: ev.Time.Sub(w).Seconds()}
			if st, ok := stop[k]; ok {
				s.Stop, s.Downtime = w.Sub(st).Seconds(), ev.Time.Sub(st).Seconds()
			}
			if rp, ok := replaced[k]; ok {
				s.Replaced, s.Active = rp.Sub(w).Seconds(), ev.Time.Sub(rp).Seconds()
			}
			if sw, ok := surge[k]; ok && sw.Before(w) {
				s.Surged, s.Downtime = w.Sub(sw).Seconds(), 0
			}
			rt.Steps = append(rt.Steps, s)
			open = nil
		case "verify":
			lastVerify = ev.Time
		case "rollback":
			if !lastVerify.IsZero() {
				rt.Spans["soak-caught"] = ev.Time.Sub(lastVerify).Seconds()
				lastVerify = time.Time{}
			}
			if open != nil {
				s := stepTimes{Phase: open.phase, Component: open.comp, Failed: true, Total: ev.Time.Sub(write[*open]).Seconds()}
				if rp, ok := replaced[*open]; ok {
					s.Replaced, s.Active = rp.Sub(write[*open]).Seconds(), ev.Time.Sub(rp).Seconds()
				}
				rt.Steps = append(rt.Steps, s)
				open = nil
			}
		case "etcd-restore":
			span("etcd-stop", "etcd-stop", ev.Time)
		case "rolled-back", "rollback-failed":
			span("rollback", "rollback", ev.Time)
			if !lastVerify.IsZero() {
				rt.Spans["verify"] = ev.Time.Sub(lastVerify).Seconds()
			}
		case "commit":
			if !lastVerify.IsZero() {
				rt.Spans["verify"] = ev.Time.Sub(lastVerify).Seconds()
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "kubelet %s, %s: exit %d %s in %s", kr.kubelet, what, r.code, rt.Outcome, rt.Total)
	for _, s := range rt.Steps {
		note := ""
		if s.Failed {
			note = "  FAILED (gave up waiting for it to answer)"
		}
		if s.Surged > 0 {
			note += fmt.Sprintf("  surge: its copy answered %.2fs after its write, then the write", s.Surged)
		}
		fmt.Fprintf(&b, "\n  %-12s %-24s stop %6.2fs  replaced %6.2fs  active %6.2fs  step %6.2fs  down %6.2fs%s", s.Phase, s.Component, s.Stop, s.Replaced, s.Active, s.Total, s.Downtime, note)
	}
	for _, name := range []string{"snapshot", "etcd-backup", "soak-caught", "etcd-stop", "rollback", "verify"} {
		if v, ok := rt.Spans[name]; ok {
			fmt.Fprintf(&b, "\n  %-12s %6.2fs", name, v)
		}
	}
	t.Log(b.String())
	kr.rep.Runs = append(kr.rep.Runs, rt)
}

// write saves the report as JSON to $STRATUM_E2E_REPORT (default
// <cache>/e2e/report.json).
func (rep *report) write(t *testing.T) {
	path := os.Getenv("STRATUM_E2E_REPORT")
	if path == "" {
		cache, err := CacheDir()
		if err != nil {
			t.Log(err)
			return
		}
		path = filepath.Join(cache, "e2e", "report.json")
	}
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Logf("report: %v", err)
		return
	}
	t.Logf("measurements written to %s", path)
}

// EtcdEndpoint is the node's etcd client URL (etcdclient.Node).
func (n *node) EtcdEndpoint() string { return testbed.EtcdURL(n.st.Ports.EtcdClient) }

// EtcdTLS is the node's etcd client TLS: the apiserver-etcd-client
// certificate and the etcd CA (etcdclient.Node).
func (n *node) EtcdTLS() (*tls.Config, error) { return testbed.EtcdClientTLS(n.st.PKIDir) }
