package manifest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ContainerSpec is the rendered exec definition of a component, read back
// from the manifest kubelet actually reads.
//
// It exists so an auditor can see a component's ARGV and its ENVIRONMENT
// together, from one artifact. For a kubelet-managed static pod those really
// are the whole story: a container's environment is the image's ENV plus the
// pod spec's env, and the kubelet does not leak its own environ into it. So
// for any component rendered here, this file is the environment — which is
// what makes an audit of etcd's boolean TLS flags decidable rather than an
// inference about etcd's defaults.
type ContainerSpec struct {
	// Command is the explicit command in the manifest. If empty, the image's
	// entrypoint is unknown to this reader.
	Command []string
	// Argv is Command followed by Args. Without Command it starts with Args,
	// not the image entrypoint.
	Argv []string
	// Env is the container's declared environment. It does NOT include the
	// image's own ENV layer, which is not visible from the manifest; that is
	// pinned by digest in build/images.txt and audited at build time.
	Env map[string]string
}

// SpecOf returns the exec definition of pod's container named name, or of
// its first container when none has that name (or name is ""). Argv is
// literal: kubelet's $(VAR) expansion is not applied. An env entry set
// through valueFrom maps to its literal value, the empty string; envFrom
// sources are not visible here. A later env entry of one name wins, as in
// kubelet. A pod without containers is an error.
func SpecOf(pod *corev1.Pod, name string) (ContainerSpec, error) {
	if len(pod.Spec.Containers) == 0 {
		return ContainerSpec{}, fmt.Errorf("pod %s: no containers", pod.Name)
	}
	c := &pod.Spec.Containers[0]
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			c = &pod.Spec.Containers[i]
			break
		}
	}
	spec := ContainerSpec{
		Command: append([]string(nil), c.Command...),
		Argv:    append(append([]string(nil), c.Command...), c.Args...),
		Env:     make(map[string]string, len(c.Env)),
	}
	for _, e := range c.Env {
		spec.Env[e.Name] = e.Value
	}
	return spec, nil
}
