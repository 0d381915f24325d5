package kubeletpod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPortConflicts: kubelet refuses a second pod that declares a host port
// the first holds (a host-network pod's container ports are host ports),
// and runs one that declares none, as a surge copy does.
func TestPortConflicts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	running := decode(t, base)
	cases := []struct {
		name string
		edit func(p *corev1.Pod)
		want string // the field of the conflicting port, "" for none
	}{
		{"the same pod again", func(p *corev1.Pod) {}, "spec.containers[0].ports[0]"},
		{"another name, same port", func(p *corev1.Pod) { p.Name = "kube-scheduler-surge" }, "spec.containers[0].ports[0]"},
		{"no ports (a surge copy)", func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }, ""},
		{"another port", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 10260 }, ""},
		{"UDP on the same port", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP }, ""},
		{"one address against every address", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].HostIP = "127.0.0.1" }, "spec.containers[0].ports[0]"},
		{"not host network: no host port", func(p *corev1.Pod) { p.Spec.HostNetwork = false }, ""},
		{"a sidecar's port", func(p *corev1.Pod) {
			c := p.Spec.Containers[0]
			c.Name, c.RestartPolicy = "sidecar", &always
			p.Spec.InitContainers = []corev1.Container{c}
			p.Spec.Containers[0].Ports = nil
		}, "spec.initContainers[0].ports[0]"},
		{"a plain init container's port", func(p *corev1.Pod) {
			c := p.Spec.Containers[0]
			c.Name = "init"
			p.Spec.InitContainers = []corev1.Container{c}
			p.Spec.Containers[0].Ports = nil
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next := decode(t, base)
			c.edit(next)
			ps := PortConflicts(running, next)
			switch {
			case c.want == "" && len(ps) > 0:
				t.Errorf("problems %v, want none", ps)
			case c.want != "" && (len(ps) != 1 || !ps[0].Refused || ps[0].What != c.want):
				t.Errorf("problems %+v, want one refusal of %s", ps, c.want)
			case c.want != "":
				for _, s := range []string{"TCP/10259", "Predicate NodePorts failed", "declare no ports"} {
					if !strings.Contains(ps[0].Message, s) {
						t.Errorf("message %q does not say %q", ps[0].Message, s)
					}
				}
			}
		})
	}
	// Two specific addresses do not meet.
	a, b := decode(t, base), decode(t, base)
	a.Spec.Containers[0].Ports[0].HostIP = "127.0.0.1"
	b.Spec.Containers[0].Ports[0].HostIP = "127.0.0.2"
	if ps := PortConflicts(a, b); len(ps) != 0 {
		t.Errorf("127.0.0.1 and 127.0.0.2: %v, want none", ps)
	}
}
