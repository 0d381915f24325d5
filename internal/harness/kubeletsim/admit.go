// Admission: kubelet's NodePorts predicate, the one admission check a
// static pod of the node can fail (kubernetes#128845).

package kubeletsim

import (
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ciq/stratum-upgrade/kubeletpod"
)

// ReasonNodePorts is the status reason of a pod kubelet rejected because a
// host port it declares is declared by an admitted pod: the predicate's
// name (lifecycle.PredicateFailureError.PredicateName).
const ReasonNodePorts = "NodePorts"

// MessageNodePorts is the status message of such a pod: kubelet's
// rejectPod prefixes the predicate's error ("Predicate NodePorts failed: "
// + nodeports.ErrReason) with "Pod was rejected: ".
const MessageNodePorts = "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"

// HostPort is one (host IP, protocol, port) a pod declares, sanitized as
// the scheduler's HostPortInfo does: no IP is 0.0.0.0, no protocol TCP.
type HostPort struct {
	IP       string
	Protocol string
	Port     int32
}

func (h HostPort) String() string { return fmt.Sprintf("%s/%s:%d", h.Protocol, h.IP, h.Port) }

// HostPorts is every host port pod declares, from its containers' ports
// with kubelet's API defaults applied (kubeletpod.Defaulted: with
// hostNetwork a containerPort is also the hostPort, SetDefaults_Pod). A
// port without a host port declares none (HostPortInfo.Add ignores port
// <= 0). Init containers are not modelled (nodeports' getContainerPorts
// reads spec.containers).
func HostPorts(pod *corev1.Pod) []HostPort {
	var out []HostPort
	for _, c := range kubeletpod.Defaulted(pod).Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			h := HostPort{IP: p.HostIP, Protocol: string(p.Protocol), Port: p.HostPort}
			if h.IP == "" {
				h.IP = "0.0.0.0"
			}
			if h.Protocol == "" {
				h.Protocol = string(corev1.ProtocolTCP)
			}
			out = append(out, h)
		}
	}
	return out
}

// conflicts is HostPortInfo.CheckConflict
// (pkg/scheduler/framework/types.go): 0.0.0.0 conflicts with the same
// protocol and port on any IP; a specific IP with the same IP or 0.0.0.0.
func conflicts(want, have HostPort) bool {
	if want.Protocol != have.Protocol || want.Port != have.Port {
		return false
	}
	return want.IP == "0.0.0.0" || have.IP == "0.0.0.0" || want.IP == have.IP
}

// RejectedError says why kubelet refused to admit a pod.
type RejectedError struct {
	// Reason and Message are the rejected pod's status reason and message.
	Reason, Message string
	// Port is the first conflicting host port, Holder the key of an
	// admitted pod that declares it.
	Port   HostPort
	Holder string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%s (host port %s is declared by %s)", e.Message, e.Port, e.Holder)
}

// Admit is kubelet's admission of pod (pkg/kubelet/lifecycle/predicate.go,
// predicateAdmitHandler.Admit) reduced to the check a static pod of the
// node can fail: the scheduler's NodePorts filter (scheduler.AdmissionCheck
// calls nodeports.Fits) of pod's host ports against those of admitted, the
// pods kubelet holds as active (GetActivePods: in the pod manager, so
// still in the manifest directory, neither rejected nor terminated; a pod
// removed from the directory is out of it even while it is killed).
// A static pod is critical, but CriticalPodAdmissionHandler
// (pkg/kubelet/preemption) only preempts for insufficient resources and
// returns any other reason unchanged, so a conflict rejects it all the
// same. It returns nil or a *RejectedError.
func Admit(pod *SourcePod, admitted []*SourcePod) error {
	want := HostPorts(pod.Pod)
	if len(want) == 0 {
		return nil
	}
	others := append([]*SourcePod(nil), admitted...)
	sort.Slice(others, func(i, j int) bool { return others[i].Key < others[j].Key })
	for _, o := range others {
		if o.UID == pod.UID {
			continue
		}
		for _, have := range HostPorts(o.Pod) {
			for _, w := range want {
				if conflicts(w, have) {
					return &RejectedError{Reason: ReasonNodePorts, Message: MessageNodePorts, Port: w, Holder: o.Key}
				}
			}
		}
	}
	return nil
}

// activeLocked is the pods kubelet's GetActivePods holds: in the manifest
// directory (desired, by UID), neither rejected nor terminated. Called
// with mu.
func (k *Kubelet) activeLocked(desired map[string]*SourcePod) []*SourcePod {
	var out []*SourcePod
	for uid, p := range k.pods {
		if _, ok := desired[uid]; ok && p.phase != phaseRejected && p.phase != phaseTerminated {
			out = append(out, p.src)
		}
	}
	return out
}

// reject is kubelet's rejectPod: the pod's status is Failed with the
// admission's reason and message, and it never reaches the pod workers.
// It stays so while its UID is in the directory. Called with mu.
func (k *Kubelet) reject(p *pod, err error) {
	var rej *RejectedError
	if !errors.As(err, &rej) {
		rej = &RejectedError{Reason: "UnexpectedAdmissionError", Message: err.Error()}
	}
	p.phase, p.rejected, p.lastChange = phaseRejected, rej, time.Now()
	k.log.Warn("pod rejected at admission; it will not run", "key", p.src.Key, "uid", p.src.UID, "file", p.src.File,
		"reason", rej.Reason, "message", rej.Message, "hostPort", rej.Port.String(), "heldBy", rej.Holder)
	k.record(EventRejected, p, nil, 0, 0, rej.Error())
	k.notify()
}
