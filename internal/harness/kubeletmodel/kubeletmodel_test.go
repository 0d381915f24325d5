package kubeletmodel

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// bed is a manifest directory written by a real *manifest.Store from the
// default node state, and a model kubelet over it.
type bed struct {
	t     *testing.T
	st    *nodestate.NodeState
	store *manifest.Store
	k     *Kubelet
}

func newBed(t *testing.T) *bed {
	t.Helper()
	root := t.TempDir()
	st, err := nodestate.Load(filepath.Join("..", "..", "..", "testdata", "states", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	st.PKIDir = filepath.Join(root, "pki")
	st.KubeconfigDir = filepath.Join(root, "kube")
	st.ConfigDir = filepath.Join(root, "config")
	st.Etcd.DataDir = filepath.Join(root, "etcd")
	store, err := manifest.Create(filepath.Join(root, "manifests"), manifest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteAll(st); err != nil {
		t.Fatal(err)
	}
	k, err := New(store.Dir(), st.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	return &bed{t: t, st: st, store: store, k: k}
}

func (b *bed) target(comp string) proc.Target {
	b.t.Helper()
	tg, err := manifest.Target(b.st, comp)
	if err != nil {
		b.t.Fatal(err)
	}
	return tg
}

func (b *bed) pids(comp string) []proc.Process {
	b.t.Helper()
	ps, err := b.k.PIDs(b.target(comp).Binary)
	if err != nil {
		b.t.Fatal(err)
	}
	return ps
}

// one is comp's single process.
func (b *bed) one(comp string) proc.Process {
	b.t.Helper()
	ps := b.pids(comp)
	if len(ps) != 1 {
		b.t.Fatalf("%s: processes %v, want one\n%s", comp, ps, strings.Join(b.k.Events(), "\n"))
	}
	return ps[0]
}

func (b *bed) mark() proc.Mark {
	b.t.Helper()
	m, err := b.k.Mark()
	if err != nil {
		b.t.Fatal(err)
	}
	return m
}

// setImage renders comp with image through the store.
func (b *bed) setImage(comp, image string) {
	b.t.Helper()
	b.st.Images[comp] = image
	if err := b.store.Start(b.st, comp); err != nil {
		b.t.Fatal(err)
	}
}

// edit rewrites comp's pod through the store's Put.
func (b *bed) edit(comp string, fn func(*manifestPod)) {
	b.t.Helper()
	raw, err := b.store.Read(comp)
	if err != nil {
		b.t.Fatal(err)
	}
	pod, err := manifest.DecodePod(raw)
	if err != nil {
		b.t.Fatal(err)
	}
	fn(pod)
	out, err := manifest.Encode(pod)
	if err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.store.Put(comp, out); err != nil {
		b.t.Fatal(err)
	}
}

type manifestPod = corev1.Pod

func schedulerImage(mode standin.Mode) string {
	img := "registry.k8s.io/kube-scheduler:v1.34.5"
	if mode != standin.ModeHealthy {
		img += "-" + string(mode)
	}
	return img
}

// TestRules pins each rule of the model (see the package doc).
func TestRules(t *testing.T) {
	ctx := context.Background()
	sched := nodestate.Scheduler
	cases := []struct {
		rule string
		run  func(t *testing.T, b *bed)
	}{
		{"every call syncs with the directory first", func(t *testing.T, b *bed) {
			if _, err := b.store.Remove(sched); err != nil {
				t.Fatal(err)
			}
			if ps := b.pids(sched); len(ps) != 0 {
				t.Fatalf("PIDs after the manifest was removed: %v", ps)
			}
		}},
		{"hidden files are ignored", func(t *testing.T, b *bed) {
			before := b.one(sched)
			raw, _ := b.store.Read(sched)
			changed := strings.Replace(string(raw), "v1.34.4", "v1.34.5", -1)
			for _, name := range []string{".kube-scheduler.yaml123", ".other.yaml"} {
				if err := os.WriteFile(filepath.Join(b.store.Dir(), name), []byte(changed), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if now := b.one(sched); now != before {
				t.Fatalf("a hidden file replaced the pod: %v -> %v", before, now)
			}
			pods, _ := b.k.Pods()
			if len(pods) != len(manifest.NamesFor(b.st)) {
				t.Fatalf("pods %+v: want one per roster manifest", pods)
			}
		}},
		{"identical content is the same pod", func(t *testing.T, b *bed) {
			before := b.one(sched)
			raw, _ := b.store.Read(sched)
			// The same bytes written again, then the same pod as JSON (other
			// bytes, the same decoded content).
			if err := os.WriteFile(b.store.Path(sched), raw, 0o600); err != nil {
				t.Fatal(err)
			}
			if now := b.one(sched); now != before {
				t.Fatalf("rewriting the same bytes replaced the pod: %v -> %v", before, now)
			}
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b.store.Path(sched), js, 0o600); err != nil {
				t.Fatal(err)
			}
			if now := b.one(sched); now != before {
				t.Fatalf("the same pod in other bytes replaced it: %v -> %v", before, now)
			}
		}},
		{"a change that survives decoding replaces the pod", func(t *testing.T, b *bed) {
			for _, c := range []struct {
				what string
				fn   func(p *manifestPod)
			}{
				{"image", func(p *manifestPod) { p.Spec.Containers[0].Image = schedulerImage(standin.ModeHealthy) }},
				{"flag", func(p *manifestPod) { p.Spec.Containers[0].Command = append(p.Spec.Containers[0].Command, "--v=2") }},
				{"restarted-at", func(p *manifestPod) {
					p.Annotations = map[string]string{manifest.RestartedAtAnnotation: "2026-01-01T00:00:00Z"}
				}},
			} {
				before := b.one(sched)
				m := b.mark()
				b.edit(sched, c.fn)
				now := b.one(sched)
				if now == before || now.StartTicks <= m.Ticks {
					t.Fatalf("%s change: %v -> %v (mark %d): want a new process started after the mark", c.what, before, now, m.Ticks)
				}
			}
		}},
		{"a replacement starts after every mark taken so far", func(t *testing.T, b *bed) {
			before := b.one(sched)
			m1 := b.mark()
			m2 := b.mark()
			if err := b.k.WaitReplaced(ctx, b.target(sched), m1, time.Minute); err == nil {
				t.Fatal("replaced before anything was written")
			}
			if err := b.k.PastMark(ctx, m2); err != nil {
				t.Fatal(err)
			}
			b.setImage(sched, schedulerImage(standin.ModeHealthy))
			if err := b.k.WaitReplaced(ctx, b.target(sched), m2, time.Minute); err != nil {
				t.Fatal(err)
			}
			now := b.one(sched)
			if now.PID == before.PID || now.StartTicks <= m2.Ticks {
				t.Fatalf("%v -> %v, marks %d %d", before, now, m1.Ticks, m2.Ticks)
			}
			// A mark taken now is after the new process.
			if err := b.k.WaitReplaced(ctx, b.target(sched), b.mark(), time.Minute); err == nil || !strings.Contains(err.Error(), "still running from before the mark") {
				t.Fatalf("WaitReplaced on a mark after the start: %v", err)
			}
		}},
		{"a removed manifest kills its process", func(t *testing.T, b *bed) {
			if err := b.k.WaitGone(ctx, b.target(sched), time.Minute); err == nil || !strings.Contains(err.Error(), "still running") {
				t.Fatalf("WaitGone with the manifest on disk: %v", err)
			}
			if _, err := b.store.Remove(sched); err != nil {
				t.Fatal(err)
			}
			if err := b.k.WaitGone(ctx, b.target(sched), time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		{"a file that does not decode keeps the old pod until a relist", func(t *testing.T, b *bed) {
			before := b.one(sched)
			if err := os.WriteFile(b.store.Path(sched), []byte("apiVersion: v1\nkind: Pod\nspec: [\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if now := b.one(sched); now != before {
				t.Fatalf("a broken file replaced the pod: %v -> %v", before, now)
			}
			if err := b.k.Relist(); err != nil {
				t.Fatal(err)
			}
			if err := b.k.WaitGone(ctx, b.target(sched), time.Minute); err != nil {
				t.Fatalf("after a relist: %v", err)
			}
		}},
		{"the process name is command[0]'s base name", func(t *testing.T, b *bed) {
			b.edit(sched, func(p *manifestPod) { p.Spec.Containers[0].Command[0] = "/opt/k8s/bin/kube-scheduler" })
			for _, bin := range []string{"kube-scheduler", "/usr/bin/kube-scheduler"} {
				if ps, _ := b.k.PIDs(bin); len(ps) != 1 {
					t.Fatalf("PIDs(%q) = %v", bin, ps)
				}
			}
			b.edit(sched, func(p *manifestPod) { p.Spec.Containers[0].Command[0] = "/opt/k8s/bin/scheduler" })
			if ps, _ := b.k.PIDs("kube-scheduler"); len(ps) != 0 {
				t.Fatalf("a process named scheduler counted as kube-scheduler: %v", ps)
			}
		}},
		{"a visible leftover sorting after the manifest wins its pod", func(t *testing.T, b *bed) {
			raw, _ := b.store.Read(sched)
			changed := strings.Replace(string(raw), "v1.34.4", "v1.34.5", -1)
			tmp := b.store.Path(sched) + ".tmp"
			if err := os.WriteFile(tmp, []byte(changed), 0o600); err != nil {
				t.Fatal(err)
			}
			pods, _ := b.k.Pods()
			found := false
			for _, p := range pods {
				if strings.HasPrefix(p.Key, "kube-system/kube-scheduler-") {
					found = true
					if p.File != tmp {
						t.Fatalf("pod %s from %s, want the leftover %s", p.Key, p.File, tmp)
					}
				}
			}
			if !found {
				t.Fatalf("no kube-scheduler pod: %+v", pods)
			}
		}},
		{"modes from the image tag", func(t *testing.T, b *bed) {
			tg := b.target(sched)
			for _, c := range []struct {
				mode         standin.Mode
				active       bool
				newEachSync  bool
				alternates   bool
				runningAfter bool
			}{
				{mode: standin.ModeHealthy, active: true, runningAfter: true},
				{mode: standin.ModeIgnoreSIGTERM, active: true, runningAfter: true},
				{mode: standin.ModeNeverListen, runningAfter: true},
				{mode: standin.ModeUnhealthy, runningAfter: true},
				{mode: standin.ModeCrashAfter, active: true, newEachSync: true, runningAfter: true},
				{mode: standin.ModeExitAtStart, alternates: true},
			} {
				m := b.mark()
				b.setImage(sched, schedulerImage(c.mode))
				if err := b.k.WaitReplaced(ctx, tg, m, time.Minute); err != nil {
					t.Fatalf("%s: a new process must show at the first sync: %v", c.mode, err)
				}
				var seen []proc.Process
				for i := 0; i < 4; i++ {
					if got := b.k.Active(ctx, tg); got != c.active {
						t.Fatalf("%s: Active = %v at check %d", c.mode, got, i)
					}
					for _, p := range b.k.procs(tg.Binary) { // no sync
						seen = append(seen, p.Process)
					}
				}
				switch {
				case c.alternates:
					if len(seen) != 2 || seen[0] == seen[1] {
						t.Fatalf("%s: processes over 4 syncs %v: want a new one every other sync", c.mode, seen)
					}
				case c.newEachSync:
					for i := 1; i < len(seen); i++ {
						if seen[i] == seen[i-1] || seen[i].StartTicks <= seen[i-1].StartTicks {
							t.Fatalf("%s: processes %v: want a new one at every sync", c.mode, seen)
						}
					}
				default:
					for _, p := range seen {
						if p != seen[0] {
							t.Fatalf("%s: processes %v: want one steady process", c.mode, seen)
						}
					}
				}
				err := b.k.WaitActive(ctx, tg, time.Hour)
				if (err == nil) != c.active {
					t.Fatalf("%s: WaitActive: %v", c.mode, err)
				}
			}
			// Without a health endpoint a running process is active, whatever
			// its mode (proc.Active's rule for kube-vip).
			b.setImage(sched, schedulerImage(standin.ModeNeverListen))
			if tg.Health = ""; !b.k.Active(ctx, tg) {
				t.Fatal("a running process without a health endpoint is not active")
			}
		}},
		{"SetImageMode overrides the tag", func(t *testing.T, b *bed) {
			img := schedulerImage(standin.ModeHealthy)
			b.k.SetImageMode(img, standin.ModeNeverListen)
			b.setImage(sched, img)
			if b.k.Active(ctx, b.target(sched)) || len(b.pids(sched)) != 1 {
				t.Fatal("image mapped to never-listen: want running, not active")
			}
		}},
		{"a reboot restarts every pod from the files in a new boot", func(t *testing.T, b *bed) {
			roster := manifest.NamesFor(b.st)
			before := map[string]proc.Process{}
			for _, comp := range roster {
				before[comp] = b.one(comp)
			}
			for i := 0; i < 50; i++ {
				// The clock well ahead of where the new boot starts.
				if err := b.k.PastMark(ctx, b.mark()); err != nil {
					t.Fatal(err)
				}
			}
			m := b.mark()
			b.setImage(sched, schedulerImage(standin.ModeHealthy)) // written, never synced
			if err := b.k.Reboot(); err != nil {
				t.Fatal(err)
			}
			now := b.mark()
			if now.BootID == m.BootID || now.Ticks >= m.Ticks {
				t.Fatalf("mark after the reboot %+v, before %+v: want a new boot id and the clock restarted", now, m)
			}
			for _, comp := range roster {
				p := b.one(comp)
				if p.PID <= before[comp].PID {
					t.Errorf("%s: pid %d after the reboot, %d before: pids are never reused", comp, p.PID, before[comp].PID)
				}
				if err := b.k.WaitReplaced(ctx, b.target(comp), m, time.Minute); err != nil {
					t.Errorf("%s: a mark of the old boot counts every process as new: %v", comp, err)
				}
			}
			pods, _ := b.k.Pods()
			for _, p := range pods {
				if uid, _ := b.k.UID(p.File); uid != p.UID {
					t.Errorf("%s runs %s, its file is %s now", p.Key, p.UID, uid)
				}
			}
		}},
		{"waits never sleep and say what they waited for", func(t *testing.T, b *bed) {
			b.setImage(sched, schedulerImage(standin.ModeNeverListen))
			tg := b.target(sched)
			t0 := time.Now()
			errs := []struct {
				err  error
				want string
			}{
				{b.k.WaitActive(ctx, tg, time.Hour), "waiting for kube-scheduler to answer on " + tg.Health},
				{b.k.WaitReplaced(ctx, tg, b.mark(), time.Hour), "waiting for kube-scheduler to be replaced after tick"},
				{b.k.WaitGone(ctx, tg, time.Hour), "waiting for kube-scheduler to exit"},
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Fatalf("three waits took %s", d)
			}
			for _, e := range errs {
				if e.err == nil || !strings.Contains(e.err.Error(), e.want) || !errors.Is(e.err, context.DeadlineExceeded) {
					t.Errorf("error %v: want one containing %q that wraps context.DeadlineExceeded", e.err, e.want)
				}
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := b.k.WaitActive(cctx, tg, time.Hour); !errors.Is(err, context.Canceled) {
				t.Errorf("a wait on an ended context: %v", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) { c.run(t, newBed(t)) })
	}
}

func TestModeOf(t *testing.T) {
	for ref, want := range map[string]standin.Mode{
		"registry.k8s.io/kube-scheduler:v1.34.5":                standin.ModeHealthy,
		"registry.k8s.io/kube-scheduler:v1.34.5-never-listen":   standin.ModeNeverListen,
		"registry.k8s.io/kube-scheduler:v1.34.5-unhealthy":      standin.ModeUnhealthy,
		"registry.k8s.io/kube-scheduler:v1.34.5-exit-at-start":  standin.ModeExitAtStart,
		"registry.k8s.io/kube-scheduler:v1.34.5-crash-after":    standin.ModeCrashAfter,
		"registry.k8s.io/kube-scheduler:v1.34.5-ignore-sigterm": standin.ModeIgnoreSIGTERM,
		"localhost:5000/kube-scheduler-crash-after":             standin.ModeHealthy,
		"registry.k8s.io/etcd@sha256:0123":                      standin.ModeHealthy,
	} {
		if got := ModeOf(ref); got != want {
			t.Errorf("ModeOf(%s) = %s, want %s", ref, got, want)
		}
	}
}
