package kubeletsim

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The rules of a surge replacement (issue 41): a second static pod of a
// component, under its own name and file, beside the first.

// TestAdmitHostPortRules pins the NodePorts check, rule by rule, on
// decoded pods: nodeports.Fits over HostPortInfo.CheckConflict
// (pkg/scheduler/framework/plugins/nodeports/node_ports.go,
// pkg/scheduler/framework/types.go), after SetDefaults_Pod's host ports.
func TestAdmitHostPortRules(t *testing.T) {
	pod := func(name string, hostNetwork bool, ports ...corev1.ContainerPort) *SourcePod {
		p := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: hostNetwork, Containers: []corev1.Container{{Name: "c", Image: "i", Ports: ports}}}}
		p.Name = name
		return &SourcePod{Key: "kube-system/" + name, UID: name, Pod: p}
	}
	tcp := func(port int32) corev1.ContainerPort {
		return corev1.ContainerPort{Name: "probe-port", ContainerPort: port, Protocol: corev1.ProtocolTCP}
	}
	with := func(cp corev1.ContainerPort, f func(*corev1.ContainerPort)) corev1.ContainerPort { f(&cp); return cp }
	old := pod("kube-apiserver", true, tcp(6443))
	cases := []struct {
		name   string
		pod    *SourcePod
		reject bool
	}{
		{"same containerPort, hostNetwork: the host port is defaulted to it", pod("surge", true, tcp(6443)), true},
		{"no ports declared", pod("surge", true), false},
		{"another port", pod("surge", true, tcp(6444)), false},
		{"another protocol", pod("surge", true, with(tcp(6443), func(p *corev1.ContainerPort) { p.Protocol = corev1.ProtocolUDP })), false},
		{"protocol left out is TCP", pod("surge", true, with(tcp(6443), func(p *corev1.ContainerPort) { p.Protocol = "" })), true},
		{"no hostNetwork: a containerPort is no host port", pod("surge", false, tcp(6443)), false},
		{"a specific host IP against 0.0.0.0", pod("surge", true, with(tcp(6443), func(p *corev1.ContainerPort) { p.HostIP = "127.0.0.1" })), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Admit(tc.pod, []*SourcePod{old})
			var rej *RejectedError
			if got := errors.As(err, &rej); got != tc.reject {
				t.Fatalf("Admit: %v, want rejected %v", err, tc.reject)
			}
			if tc.reject && (rej.Reason != ReasonNodePorts || rej.Holder != old.Key) {
				t.Fatalf("rejection %+v, want reason %s held by %s", rej, ReasonNodePorts, old.Key)
			}
		})
	}
	a := pod("a", true, with(tcp(6443), func(p *corev1.ContainerPort) { p.HostIP = "127.0.0.1" }))
	b := pod("b", true, with(tcp(6443), func(p *corev1.ContainerPort) { p.HostIP = "127.0.0.2" }))
	if err := Admit(b, []*SourcePod{a}); err != nil {
		t.Errorf("two specific host IPs: %v, want admitted", err)
	}
	if err := Admit(old, []*SourcePod{old}); err != nil {
		t.Errorf("a pod against itself: %v, want admitted", err)
	}
}

// TestSecondPodOnAHostPortIsRejected: kubelet's HandlePodAdditions
// (pkg/kubelet/kubelet.go) admits a new pod against the active pods
// (allocationManager.AddPod -> canAdmitPod -> predicateAdmitHandler.Admit,
// pkg/kubelet/lifecycle/predicate.go); on a NodePorts conflict it calls
// rejectPod (status phase Failed, reason NodePorts) and continues: the pod
// never reaches the pod workers, so it never runs. Nothing admits it
// again while its UID stays (the file source sends no new ADD for an
// unchanged pod), not even once the port's holder is gone; a change of
// its file (a new UID) is a new pod, admitted anew.
func TestSecondPodOnAHostPortIsRejected(t *testing.T) {
	b := newBed(t, nil)
	b.write("kube-apiserver.yaml", podYAML(podOpts{name: "kube-apiserver", ports: []int{16443}}))
	old := b.waitRunning(key("kube-apiserver"), nil)
	b.write("kube-apiserver-surge.yaml", podYAML(podOpts{name: "kube-apiserver-surge", command: []string{"kube-apiserver"}, ports: []int{16443}}))
	st := b.waitFor("surge pod rejected", func(st []PodStatus) bool {
		ps := Find(st, key("kube-apiserver-surge"))
		return len(ps) == 1 && ps[0].State == StateFailed
	})
	surge := Find(st, key("kube-apiserver-surge"))[0]
	if surge.Reason != ReasonNodePorts || surge.Message != MessageNodePorts || surge.PID != 0 {
		t.Fatalf("surge pod %+v, want failed with reason %s, message %q, no process", surge, ReasonNodePorts, MessageNodePorts)
	}
	b.relist()
	b.relist()
	if n := len(b.starts(key("kube-apiserver-surge"))); n != 0 {
		t.Fatalf("the rejected pod started %d times after relists, want never", n)
	}
	// The holder goes; the rejected pod is not admitted again.
	b.remove("kube-apiserver.yaml")
	b.waitGone(key("kube-apiserver"))
	b.relist()
	if ps := Find(b.k.Pods(), key("kube-apiserver-surge")); len(ps) != 1 || ps[0].State != StateFailed || len(b.starts(key("kube-apiserver-surge"))) != 0 {
		t.Fatalf("after the port's holder is gone: %+v, starts %d; want still failed, never started", ps, len(b.starts(key("kube-apiserver-surge"))))
	}
	if alive(old.PID) {
		t.Fatalf("old pid %d alive after its file was removed", old.PID)
	}
	// A changed file is a new UID: admitted, and it runs.
	b.write("kube-apiserver-surge.yaml", podYAML(podOpts{name: "kube-apiserver-surge", command: []string{"kube-apiserver"}, ports: []int{16443}, annotations: map[string]string{"try": "2"}}))
	b.waitRunning(key("kube-apiserver-surge"), nil)
	rejected := 0
	for _, e := range b.k.History() {
		if e.Kind == EventRejected {
			rejected++
		}
	}
	if rejected != 1 {
		t.Fatalf("%d rejected events, want 1", rejected)
	}
}

// TestSurgePodRunsBesideTheOld: two pods of one component under two names
// are two pod keys: pod_workers' allowStaticPodStart holds a static pod
// back only for an older pod of the same full name, and the surge declares
// no ports, so admission passes it. Rewriting the canonical manifest
// replaces the canonical pod only (its new UID is admitted: the surge
// declares no port and the old canonical pod has left the active pods);
// the surge runs on, the same process.
func TestSurgePodRunsBesideTheOld(t *testing.T) {
	b := newBed(t, nil)
	b.write("kube-apiserver.yaml", podYAML(podOpts{name: "kube-apiserver", ports: []int{16443}}))
	old := b.waitRunning(key("kube-apiserver"), nil)
	b.write("kube-apiserver-surge.yaml", podYAML(podOpts{name: "kube-apiserver-surge", command: []string{"kube-apiserver"}}))
	surge := b.waitRunning(key("kube-apiserver-surge"), nil)
	if surge.UID == old.UID || surge.PID == old.PID {
		t.Fatalf("surge %+v and old %+v share a UID or a process", surge, old)
	}
	b.write("kube-apiserver.yaml", podYAML(podOpts{name: "kube-apiserver", ports: []int{16443}, annotations: map[string]string{"version": "new"}}))
	canon := b.waitRunning(key("kube-apiserver"), func(p PodStatus) bool { return p.UID != old.UID })
	if alive(old.PID) {
		t.Fatalf("old canonical pid %d alive after its replacement runs", old.PID)
	}
	now := b.waitRunning(key("kube-apiserver-surge"), nil)
	if now.PID != surge.PID || now.UID != surge.UID {
		t.Fatalf("surge pod %+v changed while the canonical was replaced (was %+v)", now, surge)
	}
	if canon.State != StateRunning {
		t.Fatalf("new canonical pod %+v, want running", canon)
	}
}

// TestRemovingTheSurgeFileKillsOnlyTheSurgePod: a remove event deletes the
// key the removed file last yielded (kubelet's fileKeyMapping), and a
// relist misses only the pods of files that are gone, so removing the
// surge file kills the surge pod and nothing else.
func TestRemovingTheSurgeFileKillsOnlyTheSurgePod(t *testing.T) {
	b := newBed(t, nil)
	b.write("kube-apiserver.yaml", podYAML(podOpts{name: "kube-apiserver", ports: []int{16443}}))
	canon := b.waitRunning(key("kube-apiserver"), nil)
	b.write("kube-apiserver-surge.yaml", podYAML(podOpts{name: "kube-apiserver-surge", command: []string{"kube-apiserver"}}))
	surge := b.waitRunning(key("kube-apiserver-surge"), nil)
	b.relist() // both files now in the relist's file-to-key map too
	b.remove("kube-apiserver-surge.yaml")
	b.waitGone(key("kube-apiserver-surge"))
	b.relist()
	if alive(surge.PID) {
		t.Fatalf("surge pid %d alive after its file was removed", surge.PID)
	}
	now := b.waitRunning(key("kube-apiserver"), nil)
	if now.PID != canon.PID || now.UID != canon.UID {
		t.Fatalf("canonical pod %+v changed when the surge file was removed (was %+v)", now, canon)
	}
	for _, e := range b.k.History() {
		if e.Kind == EventKill && e.Key != key("kube-apiserver-surge") {
			t.Fatalf("kill of %s when only the surge file was removed: %+v", e.Key, e)
		}
	}
}
