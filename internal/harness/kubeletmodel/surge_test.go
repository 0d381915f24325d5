package kubeletmodel

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// surge writes comp's surge copy as issue 41 has it: the canonical pod
// under the name comp+"-surge" in its own file, with
// --permit-port-sharing, no ports declared (unless keepPorts) and probes
// on the port number; fn edits it further. It returns the file and the
// pod's UID.
func (b *bed) surge(comp string, keepPorts bool, fn func(*corev1.Pod)) (string, string) {
	b.t.Helper()
	raw, err := b.store.Read(comp)
	if err != nil {
		b.t.Fatal(err)
	}
	pod, err := manifest.DecodePod(raw)
	if err != nil {
		b.t.Fatal(err)
	}
	pod.Name = comp + "-surge"
	c := &pod.Spec.Containers[0]
	if !slices.ContainsFunc(c.Command, isSharing) {
		c.Command = append(c.Command, "--permit-port-sharing=true")
	}
	port := c.Ports[0].ContainerPort
	if !keepPorts {
		c.Ports = nil
		for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if pr != nil && pr.HTTPGet != nil {
				pr.HTTPGet.Port = intstr.FromInt32(port)
			}
		}
	}
	if fn != nil {
		fn(pod)
	}
	out, err := manifest.Encode(pod)
	if err != nil {
		b.t.Fatal(err)
	}
	file := filepath.Join(b.store.Dir(), pod.Name+".yaml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		b.t.Fatal(err)
	}
	uid, err := b.k.UID(file)
	if err != nil {
		b.t.Fatal(err)
	}
	return file, uid
}

func isSharing(a string) bool { return strings.HasPrefix(a, "--permit-port-sharing") }

// permitSharing renders comp with --permit-port-sharing=true, as the
// upgrade that enables surges does.
func (b *bed) permitSharing(comp string) {
	b.t.Helper()
	b.st.SetExtraArg(comp, "permit-port-sharing", "true")
	if err := b.store.Start(b.st, comp); err != nil {
		b.t.Fatal(err)
	}
}

// editFile rewrites the pod in file.
func (b *bed) editFile(file string, fn func(*corev1.Pod)) {
	b.t.Helper()
	raw, err := os.ReadFile(file)
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
	if err := os.WriteFile(file, out, 0o600); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) instances(t proc.Target) []proc.Instance {
	b.t.Helper()
	insts, byPod, err := b.k.Instances(t)
	if err != nil || !byPod {
		b.t.Fatalf("Instances(%s): byPod %v, %v", t.Name, byPod, err)
	}
	return insts
}

func (b *bed) pod(key string) Pod {
	b.t.Helper()
	pods, err := b.k.Pods()
	if err != nil {
		b.t.Fatal(err)
	}
	for _, p := range pods {
		if p.Key == key {
			return p
		}
	}
	b.t.Fatalf("no pod %s: %+v", key, pods)
	return Pod{}
}

func (b *bed) key(name string) string {
	return "kube-system/" + name + "-" + strings.ToLower(b.st.NodeName)
}

const api = nodestate.KubeAPIServer

// TestSurgeRunsBesideTheOld: a second pod of a component, under its own
// name and without ports, runs beside the first, and Instances tells them
// apart by pod, the earliest started first.
func TestSurgeRunsBesideTheOld(t *testing.T) {
	b := newBed(t)
	b.permitSharing(api)
	tg := b.target(api)
	old := b.one(api)
	canonUID := b.pod(b.key(api)).UID
	_, surgeUID := b.surge(api, false, nil)
	if ps := b.pids(api); len(ps) != 2 || !slices.Contains(ps, old) {
		t.Fatalf("processes %v, want the old %v and the surge's", ps, old)
	}
	insts := b.instances(tg)
	if len(insts) != 2 || insts[0].PodUID != canonUID || insts[1].PodUID != surgeUID || insts[0].Processes[0] != old {
		t.Fatalf("instances %+v, want the canonical %s (pid %d) then the surge %s", insts, canonUID, old.PID, surgeUID)
	}
	tg.NotPods = []string{surgeUID}
	if insts := b.instances(tg); len(insts) != 1 || insts[0].PodUID != canonUID {
		t.Fatalf("instances without the surge pod: %+v", insts)
	}
	// The canonical pod replaced: the surge is now the earliest started.
	b.setImage(api, "registry.k8s.io/kube-apiserver:v1.34.5")
	insts = b.instances(b.target(api))
	if len(insts) != 2 || insts[0].PodUID != surgeUID || insts[1].PodUID == canonUID {
		t.Fatalf("instances after the canonical replacement %+v, want the surge %s first, then a new canonical", insts, surgeUID)
	}
	// Removing the surge file kills the surge pod only.
	canon := insts[1].Processes[0]
	if err := os.Remove(filepath.Join(b.store.Dir(), api+"-surge.yaml")); err != nil {
		t.Fatal(err)
	}
	if now := b.one(api); now != canon {
		t.Fatalf("after the surge file's removal: %v, want the canonical %v untouched", now, canon)
	}
}

// TestSurgeDeclaringTheHostPortIsRejected: the NodePorts rule of
// kubeletsim.Admit (kubelet's HandlePodAdditions -> rejectPod): a surge
// that declares the canonical pod's host port never runs, is not admitted
// again while its UID stays, even once the holder is gone, and runs once
// its file changes.
func TestSurgeDeclaringTheHostPortIsRejected(t *testing.T) {
	ctx := context.Background()
	b := newBed(t)
	tg := b.target(api)
	old := b.one(api)
	file, surgeUID := b.surge(api, true, nil)
	if p := b.pod(b.key(api + "-surge")); p.Rejected != kubeletsim.ReasonNodePorts || len(p.Processes) != 0 {
		t.Fatalf("surge pod %+v, want rejected (%s) without processes", p, kubeletsim.ReasonNodePorts)
	}
	if err := b.k.WaitInstanceActive(ctx, tg, surgeUID, time.Minute); err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("WaitInstanceActive of the rejected pod: %v", err)
	}
	if err := b.k.Relist(); err != nil {
		t.Fatal(err)
	}
	if now := b.one(api); now != old {
		t.Fatalf("after a relist: %v, want only the old %v", now, old)
	}
	if _, err := b.store.Remove(api); err != nil {
		t.Fatal(err)
	}
	if ps := b.pids(api); len(ps) != 0 || b.pod(b.key(api+"-surge")).Rejected == "" {
		t.Fatalf("the holder gone: processes %v; want none, the surge still rejected", ps)
	}
	b.editFile(file, func(p *corev1.Pod) { p.Annotations = map[string]string{"try": "2"} })
	if p := b.pod(b.key(api + "-surge")); p.Rejected != "" || len(p.Processes) != 1 {
		t.Fatalf("a changed surge file: %+v, want admitted and running", p)
	}
}

// TestNotPods: Of, Arm, Replaced, WaitReplaced and WaitGone leave out the
// processes of t.NotPods, so the wait for the canonical pod's replacement
// does not count the surge's process, started before its mark, as stale.
func TestNotPods(t *testing.T) {
	ctx := context.Background()
	b := newBed(t)
	b.permitSharing(api)
	_, surgeUID := b.surge(api, false, nil)
	m := b.mark()
	b.setImage(api, "registry.k8s.io/kube-apiserver:v1.34.5")
	all := b.target(api)
	if err := b.k.WaitReplaced(ctx, all, m, time.Minute); err == nil || !strings.Contains(err.Error(), "still running from before the mark") {
		t.Fatalf("WaitReplaced counting the surge pod: %v, want its process stale", err)
	}
	canon := all
	canon.NotPods = []string{surgeUID}
	if err := b.k.WaitReplaced(ctx, canon, m, time.Minute); err != nil {
		t.Fatalf("WaitReplaced without the surge pod: %v", err)
	}
	if done, stale, err := b.k.Replaced(canon, m); !done || len(stale) != 0 || err != nil {
		t.Fatalf("Replaced without the surge pod: %v %v %v", done, stale, err)
	}
	of, err := b.k.Of(canon)
	if err != nil || len(of) != 1 || of[0].StartTicks <= m.Ticks {
		t.Fatalf("Of without the surge pod: %v %v, want the new canonical process only", of, err)
	}
	if armed, err := b.k.Arm(canon); err != nil || !slices.Equal(armed, of) {
		t.Fatalf("Arm %v %v, want Of's %v", armed, err, of)
	}
	surgeOnly := all
	surgeOnly.NotPods = []string{b.pod(b.key(api)).UID}
	if err := b.k.WaitGone(ctx, surgeOnly, time.Minute); err == nil {
		t.Fatal("WaitGone of the surge instance while it runs: no error")
	}
	if err := os.Remove(filepath.Join(b.store.Dir(), api+"-surge.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := b.k.WaitGone(ctx, surgeOnly, time.Minute); err != nil {
		t.Fatalf("WaitGone of the surge instance after its file's removal: %v", err)
	}
}

// TestWaitInstanceActive: one pod's instance answers or not by its own
// mode; the component's port answers if either instance does, so Active
// does not leave NotPods out (proc's probe cannot either).
func TestWaitInstanceActive(t *testing.T) {
	ctx := context.Background()
	b := newBed(t)
	b.permitSharing(api)
	tg := b.target(api)
	canonUID := b.pod(b.key(api)).UID
	_, surgeUID := b.surge(api, false, func(p *corev1.Pod) {
		p.Spec.Containers[0].Image = "registry.k8s.io/kube-apiserver:v1.34.5-" + string(standin.ModeUnhealthy)
	})
	if err := b.k.WaitInstanceActive(ctx, tg, canonUID, time.Minute); err != nil {
		t.Fatalf("canonical instance: %v", err)
	}
	if err := b.k.WaitInstanceActive(ctx, tg, surgeUID, time.Minute); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("unhealthy surge instance: %v", err)
	}
	if err := b.k.WaitInstanceActive(ctx, tg, "no-such-uid", time.Minute); err == nil {
		t.Fatal("an unknown pod answered")
	}
	tg.NotPods = []string{canonUID}
	if !b.k.Active(ctx, tg) {
		t.Fatal("the shared port answers (the canonical instance listens on it), yet Active is false")
	}
}

// TestMemoryAndArgs: MemAvailable and RSS are SetMemory's figures; Args is
// the container's command and args, $(VAR) expanded from its env.
func TestMemoryAndArgs(t *testing.T) {
	b := newBed(t)
	b.permitSharing(api)
	if avail, err := b.k.MemAvailable(); err != nil || avail != DefaultMemAvailable {
		t.Fatalf("default MemAvailable %d %v", avail, err)
	}
	b.surge(api, false, func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Env = []corev1.EnvVar{{Name: "LEVEL", Value: "2"}}
		c.Command = append(c.Command, "--v=$(LEVEL)")
	})
	ps := b.pids(api)
	b.k.SetMemory(1<<30, 100<<20)
	if avail, _ := b.k.MemAvailable(); avail != 1<<30 {
		t.Fatalf("MemAvailable %d, want 1 GiB", avail)
	}
	if rss, err := b.k.RSS(ps); err != nil || rss != 200<<20 {
		t.Fatalf("RSS of %v: %d %v, want 200 MiB", ps, rss, err)
	}
	gone := proc.Process{PID: 99999, StartTicks: 1}
	if _, err := b.k.RSS([]proc.Process{gone}); err == nil {
		t.Fatal("RSS of a process the model does not run: no error")
	}
	insts := b.instances(b.target(api))
	canonArgs, err := b.k.Args(insts[0].Processes[0])
	if err != nil || canonArgs[0] != "kube-apiserver" || !slices.Contains(canonArgs, "--permit-port-sharing=true") {
		t.Fatalf("canonical argv %q %v, want kube-apiserver's with --permit-port-sharing=true", canonArgs, err)
	}
	surgeArgs, err := b.k.Args(insts[1].Processes[0])
	if err != nil || !slices.Equal(surgeArgs[:len(surgeArgs)-1], canonArgs) || surgeArgs[len(surgeArgs)-1] != "--v=2" {
		t.Fatalf("surge argv %q %v, want the canonical's and --v=2 (expanded)", surgeArgs, err)
	}
	if _, err := b.k.Args(gone); err == nil {
		t.Fatal("Args of a process the model does not run: no error")
	}
}

// TestSurgeBindsOnlyWithPortSharing: the component stand-in's (and the
// real component's) listener: a second instance binds the port only when
// both run with --permit-port-sharing (SO_REUSEPORT on every socket);
// otherwise it exits at start (EADDRINUSE), restarts at every sync, never
// answers, and binds once nothing blocks it.
func TestSurgeBindsOnlyWithPortSharing(t *testing.T) {
	ctx := context.Background()
	b := newBed(t)
	tg := b.target(api)
	old := b.one(api)
	_, surgeUID := b.surge(api, false, nil) // the old one lacks the flag
	err := b.k.WaitInstanceActive(ctx, tg, surgeUID, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("surge beside an old instance without the flag: %v, want EADDRINUSE", err)
	}
	if !b.k.Active(ctx, tg) || b.k.WaitInstanceActive(ctx, tg, b.pod(b.key(api)).UID, time.Minute) != nil {
		t.Fatal("the old instance stopped answering")
	}
	b.permitSharing(api) // the canonical pod now shares: a new UID, new process
	if err := b.k.WaitInstanceActive(ctx, tg, surgeUID, time.Minute); err != nil {
		t.Fatalf("surge beside an instance with the flag: %v", err)
	}
	if ps := b.pids(api); len(ps) != 2 || slices.Contains(ps, old) {
		t.Fatalf("processes %v, want two new ones", ps)
	}
	// A third instance without the flag does not bind either.
	b.surge(api, false, func(p *corev1.Pod) {
		p.Name = api + "-third"
		p.Spec.Containers[0].Command = slices.DeleteFunc(p.Spec.Containers[0].Command, isSharing)
	})
	third := b.pod(b.key(api + "-third"))
	if err := b.k.WaitInstanceActive(ctx, tg, third.UID, time.Minute); err == nil {
		t.Fatal("an instance without the flag bound a shared port")
	}
}

func TestListenerOf(t *testing.T) {
	for _, tc := range []struct {
		argv  string
		want  listener
		listn bool
	}{
		{"kube-apiserver --secure-port=7443", listener{port: 7443}, true},
		{"/usr/local/bin/kube-scheduler --bind-address 127.0.0.1 --permit-port-sharing", listener{host: "127.0.0.1", port: 10259, share: true}, true},
		{"kube-controller-manager --permit-port-sharing=false", listener{port: 10257}, true},
		{"kube-apiserver --permit-port-sharing=maybe", listener{}, false},
		{"etcd --listen-client-urls=https://127.0.0.1:2379", listener{}, false},
		{"/kube-vip manager", listener{}, false},
	} {
		got, ok := listenerOf(strings.Fields(tc.argv))
		if ok != tc.listn || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v %v", tc.argv, got, ok, tc.want, tc.listn)
		}
	}
	a, b := listener{host: "127.0.0.1", port: 1}, listener{host: "127.0.0.2", port: 1}
	if a.overlaps(b) || !a.overlaps(listener{port: 1}) || !a.overlaps(listener{host: "0.0.0.0", port: 1}) || a.overlaps(listener{host: "127.0.0.1", port: 2}) {
		t.Error("overlaps: want the same address or a wildcard on the same port only")
	}
}
