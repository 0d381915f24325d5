package manifest

// Surge copies: a component's new pod run beside the old one under a second
// static pod name, both listening on one port with SO_REUSEPORT, so the
// component never stops serving while it is replaced (issue 41).

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// PortSharingFlag is the flag (without dashes) with which kube-apiserver,
// kube-controller-manager and kube-scheduler listen with SO_REUSEPORT
// (since Kubernetes 1.19, kubernetes#88893). The kernel lets a second
// socket bind a port only when every socket on it set the option, so the
// running instance, the surge copy and the canonical pod that replaces it
// all need the flag.
const PortSharingFlag = "permit-port-sharing"

// surgeSuffix is appended to a component's pod and file name for its surge
// copy.
const surgeSuffix = "-surge"

// ErrNoSurge is wrapped by RenderSurge's error for a component that is
// never replaced with a surge copy: etcd (one data directory), kube-vip,
// and any name that is not a component.
var ErrNoSurge = errors.New("component is not replaced with a surge copy")

// surging are the components with a surge copy: the three that take
// PortSharingFlag and hand over without state of their own.
var surging = []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}

// Surges reports whether component name is replaced with a surge copy:
// kube-apiserver, kube-controller-manager and kube-scheduler.
func Surges(name string) bool {
	for _, n := range surging {
		if n == name {
			return true
		}
	}
	return false
}

// SurgeFileName is the manifest file name of component name's surge copy,
// "<name>-surge.yaml". It does not check name.
func SurgeFileName(name string) string { return SurgePodName(name) + ".yaml" }

// SurgePodName is the static pod name of component name's surge copy,
// "<name>-surge"; kubelet names its mirror pod "<name>-surge-<node>".
func SurgePodName(name string) string { return name + surgeSuffix }

// SurgeComponent reports whether file, a base name in the manifest
// directory, is the surge copy of a component that surges, and which one.
// Such a file is stratum's own: not a stray, not a shadow (its pod name is
// not the component's).
func SurgeComponent(file string) (name string, ok bool) {
	base, found := strings.CutSuffix(file, surgeSuffix+".yaml")
	if !found || !Surges(base) {
		return "", false
	}
	return base, true
}

// RenderSurge is the surge copy of component name: Render of
// WithPortSharing(st), so it runs exactly what the next canonical manifest
// will, with these changes only, each because kubelet would otherwise not
// run it beside the canonical pod:
//   - its pod name is SurgePodName(name). kubelet keys a static pod by its
//     name and namespace, and its UID hashes the name and file path; two
//     files with one name are one pod to it (the later file wins).
//   - no container declares ports. A host-network pod's ports are host
//     ports, and kubelet's admission refuses a second pod that declares
//     one in use ("Predicate NodePorts failed", kubernetes#128845).
//   - every probe that names a container port uses its number instead, as
//     there is no port left to name.
//   - PortSharingFlag is on: appended when the render lacks it.
//
// Its labels stay the component's: kubelet never compares labels (only
// name, namespace and UID tell static pods apart), and `kubectl -l
// component=` and monitoring keep finding the instance that serves during
// the hand-over. The cost, for the seconds both run: kubeadm's lookup of a
// node's apiserver endpoint by component and tier labels expects exactly
// one pod, so a kubeadm command on this node would fail then.
//
// It is pure, as Render is. An error wrapping ErrNoSurge is a component
// that does not surge; a render whose flags turn port sharing off (an
// extra arg set to false) is refused, since the surge copy could not bind.
func RenderSurge(st *nodestate.NodeState, prof Profile, name, restartedAt string) (*corev1.Pod, error) {
	if !Surges(name) {
		return nil, fmt.Errorf("render surge copy of %q: %w (only %s do)", name, ErrNoSurge, joinNames(surging))
	}
	pod, err := Render(WithPortSharing(st), prof, name, restartedAt)
	if err != nil {
		return nil, fmt.Errorf("surge copy: %w", err)
	}
	if err := toSurge(pod, name); err != nil {
		return nil, fmt.Errorf("render surge copy of %s: %w", name, err)
	}
	return pod, nil
}

// RenderSurgeBytes is Encode(RenderSurge(st, prof, name, restartedAt)).
func RenderSurgeBytes(st *nodestate.NodeState, prof Profile, name, restartedAt string) ([]byte, error) {
	pod, err := RenderSurge(st, prof, name, restartedAt)
	if err != nil {
		return nil, err
	}
	return Encode(pod)
}

// SurgeBytes is the surge copy of canonical, the exact bytes of component
// name's manifest as a transaction writes it (a render, or a snapshot's
// bytes with a stamp): the same pod made its surge copy as RenderSurge
// makes one, so the copy runs exactly what the canonical write will. Pure.
func SurgeBytes(name string, canonical []byte) ([]byte, error) {
	if !Surges(name) {
		return nil, fmt.Errorf("surge copy of %q: %w (only %s do)", name, ErrNoSurge, joinNames(surging))
	}
	pod, err := DecodePod(canonical)
	if err != nil {
		return nil, fmt.Errorf("surge copy of %s: %w", name, err)
	}
	if err := toSurge(pod, name); err != nil {
		return nil, fmt.Errorf("surge copy of %s: %w", name, err)
	}
	return Encode(pod)
}

// toSurge makes pod, component name's render, its surge copy in place.
func toSurge(pod *corev1.Pod, name string) error {
	pod.Name = SurgePodName(name)
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p == nil {
					continue
				}
				if err := numericPort(c, p.HTTPGet, p.TCPSocket); err != nil {
					return err
				}
			}
			if l := c.Lifecycle; l != nil {
				for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
					if h != nil {
						if err := numericPort(c, h.HTTPGet, h.TCPSocket); err != nil {
							return err
						}
					}
				}
			}
			c.Ports = nil // after the probes took their numbers
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != name {
			continue
		}
		argv := append(append([]string(nil), c.Command...), c.Args...)
		switch set, on := portSharing(argv); {
		case set && !on:
			return fmt.Errorf("its flags turn --%s off (an extra arg?), so it could not listen beside the running instance: drop that extra arg, or replace %s without a surge", PortSharingFlag, name)
		case !set && len(c.Args) > 0:
			c.Args = append(c.Args, "--"+PortSharingFlag+"=true")
		case !set:
			c.Command = append(c.Command, "--"+PortSharingFlag+"=true")
		}
		return nil
	}
	return fmt.Errorf("no container named %s to give --%s", name, PortSharingFlag)
}

// numericPort replaces the named port of an HTTP or TCP action by the
// number of c's container port of that name, as kubelet resolves it.
func numericPort(c *corev1.Container, get *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction) error {
	for _, port := range []*intstr.IntOrString{portOf(get), portOfTCP(tcp)} {
		if port == nil || port.Type == intstr.Int {
			continue
		}
		n, ok := namedPort(c, port.StrVal)
		if !ok {
			return fmt.Errorf("container %s: a probe names port %q, which the container does not declare", c.Name, port.StrVal)
		}
		*port = intstr.FromInt32(n)
	}
	return nil
}

func portOf(a *corev1.HTTPGetAction) *intstr.IntOrString {
	if a == nil {
		return nil
	}
	return &a.Port
}

func portOfTCP(a *corev1.TCPSocketAction) *intstr.IntOrString {
	if a == nil {
		return nil
	}
	return &a.Port
}

// namedPort is the number of c's port named name. kubelet also accepts a
// number written as a string; so does this.
func namedPort(c *corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	if n, err := strconv.ParseInt(name, 10, 32); err == nil && n > 0 {
		return int32(n), true
	}
	return 0, false
}

// HasPortSharing reports whether argv, a component's command line, turns
// PortSharingFlag on, as pflag parses it: --permit-port-sharing alone or
// with a true value (strconv.ParseBool's), the last occurrence winning,
// and nothing after a "--" counted. An unparsable value is off (the
// process would not have started with it). The engine asks this of the
// running process's argv: a surge copy can bind beside it only when it is
// true.
func HasPortSharing(argv []string) bool {
	_, on := portSharing(argv)
	return on
}

// portSharing is whether argv sets PortSharingFlag at all, and its value.
func portSharing(argv []string) (set, on bool) {
	for _, a := range argv {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || name != PortSharingFlag {
			continue
		}
		set, on = true, true
		if hasValue {
			b, err := strconv.ParseBool(value)
			on = err == nil && b
		}
	}
	return set, on
}

// WithPortSharing returns a copy of st with the extra arg
// permit-port-sharing: "true" on each surging component of its roster
// whose version takes the flag (every supported one: 1.34 to 1.37), so
// that its render carries --permit-port-sharing=true after the rendered
// flags, where kubeadm puts extra args. A component that already has the
// extra arg keeps its value: an operator's false stays false (and then it
// does not surge). It is pure; st is not changed. The engine puts it in an
// upgrade's next node state; adoption never calls it, since the flag
// changes the pod, which kubelet would restart.
func WithPortSharing(st *nodestate.NodeState) *nodestate.NodeState {
	out := st.Clone()
	n := resolve.Resolve(st)
	for _, name := range NamesFor(st) {
		if !Surges(name) {
			continue
		}
		if _, set := out.ExtraArgs[name][PortSharingFlag]; set {
			continue
		}
		v, err := versions.Of(n, name)
		if err != nil || v == nil || versions.CheckArgs(name, v, map[string]string{PortSharingFlag: "true"}) != nil {
			continue // no version to go by, or one without the flag: render as is
		}
		out.SetExtraArg(name, PortSharingFlag, "true")
	}
	return out
}
