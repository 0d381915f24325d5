package kubeletpod

// This file holds the one rule kubelet applies between two static pods of a
// node: a pod may not declare a host port another running pod holds.

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// bindAll is the address kubelet's port check reads for a port with no
// host IP (the scheduler framework's DefaultBindAllHostIP).
const bindAll = "0.0.0.0"

// hostPort is one host port of a pod and the field that declares it.
type hostPort struct {
	path     string
	ip       string
	protocol corev1.Protocol
	port     int32
}

// hostPorts are the host ports pod holds once kubelet runs it, as its
// admission reads them (the scheduler's util.GetHostPorts on the defaulted
// pod): the ports with a host port of every regular container and of every
// restartable (sidecar) init container. A host-network pod's container
// ports all have one: the API default copies the container port (Default).
func hostPorts(pod *corev1.Pod) []hostPort {
	p := Defaulted(pod)
	var out []hostPort
	add := func(kind string, i int, c corev1.Container) {
		for j, cp := range c.Ports {
			if cp.HostPort == 0 && p.Spec.HostNetwork {
				cp.HostPort = cp.ContainerPort // the API default, which Default applies to regular containers only
			}
			if cp.HostPort <= 0 {
				continue
			}
			ip, proto := cp.HostIP, cp.Protocol
			if ip == "" {
				ip = bindAll
			}
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			out = append(out, hostPort{fmt.Sprintf("spec.%s[%d].ports[%d]", kind, i, j), ip, proto, cp.HostPort})
		}
	}
	for i, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add("initContainers", i, c)
		}
	}
	for i, c := range p.Spec.Containers {
		add("containers", i, c)
	}
	return out
}

// PortConflicts is what kubelet refuses in static pod next while pod
// running runs on the node: each host port of next that running holds,
// the same protocol and port on the same address, or on any address when
// either side has none or 0.0.0.0 (HostPortInfo.CheckConflict). kubelet's
// admission refuses such a pod as a whole ("Predicate NodePorts failed",
// kubernetes#128845) and never runs it, however the processes share the
// socket. So a surge copy beside its component's pod declares no ports.
// Nil when next may run beside running.
func PortConflicts(running, next *corev1.Pod) []Problem {
	held := hostPorts(running)
	var out []Problem
	for _, w := range hostPorts(next) {
		for _, h := range held {
			if w.protocol != h.protocol || w.port != h.port || (w.ip != h.ip && w.ip != bindAll && h.ip != bindAll) {
				continue
			}
			out = append(out, Problem{Refused: true, What: w.path, Message: fmt.Sprintf(
				"pod %s declares host port %s/%d (%s), which pod %s holds (%s): kubelet refuses it while %s runs (Predicate NodePorts failed); declare no ports on the second pod and give its probes port numbers",
				next.Name, w.protocol, w.port, w.path, running.Name, h.path, running.Name)})
			break
		}
	}
	return out
}
