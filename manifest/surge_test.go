package manifest

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

const sharing = "--" + PortSharingFlag + "=true"

// forEachSurging runs f for each surging component of every testdata state.
func forEachSurging(t *testing.T, f func(t *testing.T, st *nodestate.NodeState, prof Profile, name string)) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		if Surges(name) {
			f(t, st, prof, name)
		}
	})
}

// TestRenderSurge: the surge copy is the render of WithPortSharing(st) with
// a second name, no ports and numeric probe ports, and nothing else changed.
func TestRenderSurge(t *testing.T) {
	forEachSurging(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		const stamp = "2026-12-07T06:00:00Z"
		got, err := RenderSurge(st, prof, name, stamp)
		if err != nil {
			t.Fatal(err)
		}
		want := renderPod(t, WithPortSharing(st), prof, name, stamp)
		if got.Name != name+"-surge" || got.Namespace != want.Namespace {
			t.Errorf("pod %s/%s, want %s/%s-surge", got.Namespace, got.Name, want.Namespace, name)
		}
		if !reflect.DeepEqual(got.Labels, want.Labels) {
			t.Errorf("labels %v, want the component's %v", got.Labels, want.Labels)
		}
		c, wc := got.Spec.Containers[0], want.Spec.Containers[0]
		if len(c.Ports) != 0 {
			t.Errorf("ports %v, want none", c.Ports)
		}
		if spec, _ := SpecOf(got, name); !HasPortSharing(spec.Argv) || countOf(spec.Argv, sharing) != 1 {
			t.Errorf("argv %v: want %s once", spec.Argv, sharing)
		}
		probes := []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe}
		for i, wp := range []*corev1.Probe{wc.LivenessProbe, wc.ReadinessProbe, wc.StartupProbe} {
			if (wp == nil) != (probes[i] == nil) {
				t.Fatalf("probe %d: %v, want %v", i, probes[i], wp)
			}
			if wp == nil {
				continue
			}
			gp := probes[i].HTTPGet.Port
			if gp.Type != intstr.Int || gp.IntValue() != probePort(t, wc, wp.HTTPGet) {
				t.Errorf("probe %d port %v, want the number of %v", i, gp.String(), wp.HTTPGet.Port.String())
			}
			probes[i].HTTPGet.Port = wp.HTTPGet.Port // to compare the rest
		}
		got.Name = want.Name
		got.Spec.Containers[0].Ports = wc.Ports
		if d := kubeletpod.Diff(want, got); len(d) > 0 {
			t.Errorf("surge copy differs from the render in more: %v", d)
		}
	})
}

// TestSurgeCopyRunsBesideTheCanonicalPod: kubelet of every supported minor
// runs the surge copy's file, and runs it beside the canonical pod of the
// same render and of the current one; a copy that kept the ports would be
// refused (the test would not see a conflict if PortConflicts saw none).
func TestSurgeCopyRunsBesideTheCanonicalPod(t *testing.T) {
	forEachSurging(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		b, err := RenderSurgeBytes(st, prof, name, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, minor := range versions.KubernetesMinors {
			if ps, err := kubeletpod.Check(b, "v"+minor+".0"); err != nil || len(ps) > 0 {
				t.Errorf("kubelet %s: %v %v", minor, ps, err)
			}
		}
		surge, err := DecodePod(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, canonical := range []*corev1.Pod{renderPod(t, st, prof, name, ""), renderPod(t, WithPortSharing(st), prof, name, "")} {
			if ps := kubeletpod.PortConflicts(canonical, surge); len(ps) > 0 {
				t.Errorf("beside the canonical pod: %v", ps)
			}
			if ps := kubeletpod.PortConflicts(surge, canonical); len(ps) > 0 {
				t.Errorf("canonical beside the surge copy: %v", ps)
			}
			renamed := canonical.DeepCopy()
			renamed.Name = surge.Name
			if ps := kubeletpod.PortConflicts(canonical, renamed); len(ps) != 1 {
				t.Errorf("a second name alone: conflicts %v, want the probe port's", ps)
			}
		}
	})
}

func TestRenderSurgeRefuses(t *testing.T) {
	st := loadState(t, "default-vip")
	for _, name := range []string{nodestate.Etcd, nodestate.KubeVIP, "kube-proxy", ""} {
		if _, err := RenderSurge(st, Profile{}, name, ""); !errors.Is(err, ErrNoSurge) {
			t.Errorf("%q: %v, want ErrNoSurge", name, err)
		}
		if _, err := RenderSurgeBytes(st, Profile{}, name, ""); !errors.Is(err, ErrNoSurge) {
			t.Errorf("bytes of %q: %v, want ErrNoSurge", name, err)
		}
	}
	// An operator's extra arg that turns sharing off: the copy could not bind.
	off := st.Clone()
	off.SetExtraArg(nodestate.Scheduler, PortSharingFlag, "false")
	if _, err := RenderSurge(off, Profile{}, nodestate.Scheduler, ""); err == nil || errors.Is(err, ErrNoSurge) {
		t.Errorf("sharing off: %v, want a refusal that names the flag", err)
	}
	// A stopped component has no render, so no surge copy.
	stopped := st.Clone()
	stopped.Stopped = []string{nodestate.Scheduler}
	if _, err := RenderSurge(stopped, Profile{}, nodestate.Scheduler, ""); err == nil {
		t.Error("a stopped component rendered a surge copy")
	}
}

// TestToSurgeAddsTheFlag: a render without the flag (a version whose
// table lacks it) gets it at the end of its command line, in args when
// the container has args; named ports of any handler become numbers.
func TestToSurgeAddsTheFlag(t *testing.T) {
	pod := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:    "kube-scheduler",
			Command: []string{"kube-scheduler", "--v=2"},
			Ports:   []corev1.ContainerPort{{Name: ProbePortName, ContainerPort: 10259}},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(ProbePortName)}}},
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
				HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString(ProbePortName)}}},
		}}}}
	}
	p := pod()
	if err := toSurge(p, nodestate.Scheduler); err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"kube-scheduler", "--v=2", sharing}) || c.Args != nil {
		t.Errorf("command %v args %v", c.Command, c.Args)
	}
	if c.LivenessProbe.TCPSocket.Port != intstr.FromInt32(10259) || c.Lifecycle.PreStop.HTTPGet.Port != intstr.FromInt32(10259) {
		t.Errorf("ports %v %v, want 10259", c.LivenessProbe.TCPSocket.Port, c.Lifecycle.PreStop.HTTPGet.Port)
	}
	p = pod()
	p.Spec.Containers[0].Args = []string{"--v=4"}
	if err := toSurge(p, nodestate.Scheduler); err != nil {
		t.Fatal(err)
	}
	if c := p.Spec.Containers[0]; !slices.Equal(c.Args, []string{"--v=4", sharing}) || len(c.Command) != 2 {
		t.Errorf("command %v args %v", c.Command, c.Args)
	}
	p = pod()
	p.Spec.Containers[0].Ports = nil
	if err := toSurge(p, nodestate.Scheduler); err == nil {
		t.Error("a probe naming an undeclared port: no error")
	}
}

func TestSurgeNames(t *testing.T) {
	for _, name := range Names {
		want := name == nodestate.KubeAPIServer || name == nodestate.ControllerManager || name == nodestate.Scheduler
		if Surges(name) != want {
			t.Errorf("Surges(%s) = %v", name, !want)
		}
		got, ok := SurgeComponent(SurgeFileName(name))
		if ok != want || (ok && got != name) {
			t.Errorf("SurgeComponent(%s) = %q %v", SurgeFileName(name), got, ok)
		}
		if _, ok := ManifestName(SurgeFileName(name)); ok {
			t.Errorf("ManifestName(%s): a surge copy is not a component manifest", SurgeFileName(name))
		}
	}
	if SurgeFileName(nodestate.KubeAPIServer) != "kube-apiserver-surge.yaml" {
		t.Errorf("SurgeFileName = %s", SurgeFileName(nodestate.KubeAPIServer))
	}
	for _, f := range []string{"kube-apiserver.yaml", "kube-apiserver-surge.yaml.tmp", "kube-apiserver-surge", ".kube-apiserver-surge.yaml", "-surge.yaml", "kube-apiserver-surge-surge.yaml", "kube-proxy-surge.yaml"} {
		if c, ok := SurgeComponent(f); ok {
			t.Errorf("SurgeComponent(%q) = %q, want none", f, c)
		}
	}
}

func TestHasPortSharing(t *testing.T) {
	cases := []struct {
		argv []string
		want bool
	}{
		{nil, false},
		{[]string{"kube-apiserver", "--secure-port=6443"}, false},
		{[]string{"kube-apiserver", "--permit-port-sharing"}, true},
		{[]string{"kube-apiserver", "--permit-port-sharing=true"}, true},
		{[]string{"kube-apiserver", "--permit-port-sharing=1"}, true},
		{[]string{"kube-apiserver", "--permit-port-sharing=True"}, true},
		{[]string{"kube-apiserver", "--permit-port-sharing=false"}, false},
		{[]string{"kube-apiserver", "--permit-port-sharing=0"}, false},
		{[]string{"kube-apiserver", "--permit-port-sharing=yes"}, false},
		{[]string{"kube-apiserver", "--permit-port-sharing=true", "--permit-port-sharing=false"}, false},
		{[]string{"kube-apiserver", "--permit-port-sharing=false", "--permit-port-sharing"}, true},
		{[]string{"kube-apiserver", "--", "--permit-port-sharing=true"}, false},
		{[]string{"kube-apiserver", "-permit-port-sharing=true"}, false},
		{[]string{"kube-apiserver", "--permit-port-sharing-x=true"}, false},
		{[]string{"kube-apiserver", "--permit-port-sharingtrue"}, false},
	}
	for _, c := range cases {
		if got := HasPortSharing(c.argv); got != c.want {
			t.Errorf("HasPortSharing(%q) = %v, want %v", c.argv, got, c.want)
		}
	}
}

// TestWithPortSharing: the render of WithPortSharing(st) differs from
// Render(st) only by --permit-port-sharing=true, written after the rendered
// flags with the extra args as kubeadm writes them, on the three surging
// components; etcd and kube-vip render as before, and st is unchanged.
func TestWithPortSharing(t *testing.T) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		before, err := st.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		next := WithPortSharing(st)
		if after, _ := st.Marshal(); !slices.Equal(before, after) {
			t.Fatal("WithPortSharing changed its argument")
		}
		if err := next.Validate(); err != nil {
			t.Fatalf("the result does not validate: %v", err)
		}
		old, got := renderPod(t, st, prof, name, ""), renderPod(t, next, prof, name, "")
		oldArgv, _ := SpecOf(old, name)
		gotArgv, _ := SpecOf(got, name)
		if !Surges(name) {
			if d := kubeletpod.Diff(old, got); len(d) > 0 {
				t.Errorf("%s changed: %v", name, d)
			}
			return
		}
		i := slices.Index(gotArgv.Argv, sharing)
		if i < 0 || countOf(gotArgv.Argv, sharing) != 1 {
			t.Fatalf("argv %v: want %s once", gotArgv.Argv, sharing)
		}
		// kubeadm's ArgumentsToCommand: the rendered flags, then the extra
		// args (those extraArgsOrder does not place, sorted by name).
		want := nodestate.Arg{Name: PortSharingFlag, Value: "true"}
		extra := next.ExtraArgList(name)
		at := slices.Index(extra, want)
		if at < 0 || i != len(gotArgv.Argv)-len(extra)+at {
			t.Errorf("argv %v: %s at %d, want it among the extra args %v", gotArgv.Argv, sharing, i, extra)
		}
		got.Spec.Containers[0].Command = slices.Delete(slices.Clone(got.Spec.Containers[0].Command), i, i+1)
		if d := kubeletpod.Diff(old, got); len(d) > 0 {
			t.Errorf("differs by more than the flag: %v (argv %v against %v)", d, gotArgv.Argv, oldArgv.Argv)
		}
	})
}

// TestWithPortSharingKeepsWhatIsSet: an operator's value stays, one more
// call changes nothing, and a stopped component gets no extra arg (its
// state would not validate).
func TestWithPortSharingKeepsWhatIsSet(t *testing.T) {
	st := loadState(t, "default")
	st.SetExtraArg(nodestate.Scheduler, PortSharingFlag, "false")
	st.Stopped = []string{nodestate.ControllerManager}
	next := WithPortSharing(st)
	if got := next.ExtraArgs[nodestate.Scheduler][PortSharingFlag]; !slices.Equal(got, []string{"false"}) {
		t.Errorf("scheduler's extra arg %v, want the operator's false", got)
	}
	if _, set := next.ExtraArgs[nodestate.ControllerManager]; set {
		t.Errorf("a stopped component got extra args %v", next.ExtraArgs[nodestate.ControllerManager])
	}
	if got := next.ExtraArgs[nodestate.KubeAPIServer][PortSharingFlag]; !slices.Equal(got, []string{"true"}) {
		t.Errorf("apiserver's extra arg %v, want true", got)
	}
	if _, set := next.ExtraArgs[nodestate.Etcd]; set {
		t.Error("etcd got the flag")
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	a, _ := next.Marshal()
	b, _ := WithPortSharing(next).Marshal()
	if !slices.Equal(a, b) {
		t.Error("a second WithPortSharing changed the state")
	}
}

// TestSurgeAtEverySupportedVersion: every supported release's flag table
// has --permit-port-sharing, so WithPortSharing adds it and the surge copy
// renders at each.
func TestSurgeAtEverySupportedVersion(t *testing.T) {
	for _, kv := range supportedKube {
		st := loadState(t, "default")
		st.KubernetesVersion = kv
		for _, c := range surging {
			st.Images[c] = "registry.k8s.io/" + c + ":" + kv
		}
		next := WithPortSharing(st)
		for _, c := range surging {
			if _, set := next.ExtraArgs[c][PortSharingFlag]; !set {
				t.Errorf("%s %s: no %s extra arg", c, kv, PortSharingFlag)
			}
			if _, err := RenderSurge(st, Profile{}, c, ""); err != nil {
				t.Errorf("%s %s: %v", c, kv, err)
			}
		}
	}
}
