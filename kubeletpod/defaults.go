package kubeletpod

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Default applies to pod, in place, the API defaults that kubelet's file
// source applies when it decodes a static pod (legacyscheme's
// UniversalDecoder runs SetObjectDefaults_Pod of
// k8s.io/kubernetes/pkg/apis/core/v1) before it hashes the pod into its
// UID. It is a subset of those defaults: the ones a control-plane pod can
// meet (pod, pod spec, container, port, probe, HTTP action, host path and
// field reference). A default it leaves out can only make two pods that
// kubelet sees as one look different here, never the reverse, because the
// same deterministic defaulting applied to equal pods gives equal pods.
// Left out on purpose: the rounding of resource quantities to milli scale
// (it changes a quantity's representation, which kubelet's hash sees) and
// the feature-gated ones (probe HTTP protocol, pod-level resources).
//
// The real kubelet's UID is the reference, in the tests of
// internal/harness/kubeadmgen (make test-real): kubeletuid_test.go pins
// kubelet's rule (a default written out or left out keeps the UID) on the
// real kubelet code, and TestRealKubeletSameAgreesWithUID (adopt_test.go)
// checks that Same, with these defaults, agrees with that UID on kubeadm's
// manifests, respelled and changed.
func Default(pod *corev1.Pod) {
	spec := &pod.Spec
	// SetDefaults_Pod: requests default to limits; a host-network pod's
	// ports default their host port to the container port.
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Resources.Limits != nil {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			for k, v := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[k]; !ok {
					c.Resources.Requests[k] = v.DeepCopy()
				}
			}
		}
	}
	if spec.EnableServiceLinks == nil {
		v := corev1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &v
	}
	if spec.HostNetwork {
		for i := range spec.Containers {
			for j := range spec.Containers[i].Ports {
				p := &spec.Containers[i].Ports[j]
				if p.HostPort == 0 {
					p.HostPort = p.ContainerPort
				}
			}
		}
	}
	// SetDefaults_PodSpec.
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = corev1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = corev1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		v := int64(corev1.DefaultTerminationGracePeriodSeconds)
		spec.TerminationGracePeriodSeconds = &v
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = corev1.DefaultSchedulerName
	}
	for i := range spec.Volumes {
		if hp := spec.Volumes[i].HostPath; hp != nil && hp.Type == nil {
			t := corev1.HostPathUnset
			hp.Type = &t
		}
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i])
	}
}

// defaultContainer is SetDefaults_Container and the generated defaults of
// a container's ports, env field references and probes.
func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.TimeoutSeconds == 0 {
			p.TimeoutSeconds = 1
		}
		if p.PeriodSeconds == 0 {
			p.PeriodSeconds = 10
		}
		if p.SuccessThreshold == 0 {
			p.SuccessThreshold = 1
		}
		if p.FailureThreshold == 0 {
			p.FailureThreshold = 3
		}
		if h := p.HTTPGet; h != nil {
			if h.Path == "" {
				h.Path = "/"
			}
			if h.Scheme == "" {
				h.Scheme = corev1.URISchemeHTTP
			}
		}
	}
}

// PullPolicy is c's image pull policy as kubelet reads it: the one set,
// else IfNotPresent, or Always for an image tagged latest (or untagged).
func PullPolicy(c corev1.Container) corev1.PullPolicy {
	defaultContainer(&c)
	return c.ImagePullPolicy
}

// imageTag is the tag of an image reference as kubelet's
// parsers.ParseImageName reads it for the pull policy: the tag when there
// is one (a digest beside it does not matter), "" for a digest alone, and
// "latest" for a reference with neither.
func imageTag(image string) string {
	name, _, digest := strings.Cut(image, "@")
	slash := strings.LastIndexByte(name, '/')
	if i := strings.LastIndexByte(name, ':'); i > slash {
		return name[i+1:]
	}
	if digest {
		return ""
	}
	return "latest"
}
