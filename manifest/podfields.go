package manifest

// The node state's per-component pod fields applied to a rendered pod as
// kubeadm applies its configuration's (cmd/kubeadm/app/phases/controlplane
// volumes.go and manifests.go, util/staticpod, util/patches): extra
// volumes merged with the rendered ones by name, extra environment
// variables sorted by name, resources, and last the patches.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// applyPodFields applies st's extraVolumes, extraEnvs, resources and
// patches of component name to pod, in kubeadm's order: the pod is built
// with the first three, then patched.
func applyPodFields(st *nodestate.NodeState, name string, pod *corev1.Pod, seen patchSeen) (*corev1.Pod, error) {
	c := &pod.Spec.Containers[0]
	if vols := st.ExtraVolumes[name]; len(vols) > 0 {
		addExtraVolumes(pod, name, vols)
	}
	if envs := st.ExtraEnvs[name]; len(envs) > 0 {
		c.Env = mergeEnv(c.Env, envs, name != nodestate.KubeVIP)
	}
	if r, ok := st.Resources[name]; ok {
		res, err := r.Requirements()
		if err != nil {
			return nil, fmt.Errorf("resources.%s.%w", name, err)
		}
		c.Resources = res
	}
	if err := uniqueMountPaths(c); err != nil {
		return nil, err
	}
	return applyPatches(st, name, pod, seen)
}

// addExtraVolumes merges vols into pod as kubeadm's
// AddExtraHostPathMounts: a volume (and its mount) of a rendered name is
// replaced, the others added, and volumes and mounts are sorted by name,
// as kubeadm writes them. etcd's mounts keep kubeadm's order (data, then
// certificates; kubeadm has no etcd extra volumes), the extra ones after
// them, as kube-vip's.
func addExtraVolumes(pod *corev1.Pod, name string, vols []nodestate.HostPathMount) {
	c := &pod.Spec.Containers[0]
	for _, v := range vols {
		typ := v.PathType
		vol := corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: v.HostPath, Type: &typ}}}
		mount := corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, ReadOnly: v.ReadOnly}
		if i := slices.IndexFunc(pod.Spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name }); i >= 0 {
			pod.Spec.Volumes[i] = vol
		} else {
			pod.Spec.Volumes = append(pod.Spec.Volumes, vol)
		}
		if i := slices.IndexFunc(c.VolumeMounts, func(o corev1.VolumeMount) bool { return o.Name == v.Name }); i >= 0 {
			c.VolumeMounts[i] = mount
		} else {
			c.VolumeMounts = append(c.VolumeMounts, mount)
		}
	}
	if name == nodestate.KubeVIP {
		return
	}
	slices.SortStableFunc(pod.Spec.Volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
	if name != nodestate.Etcd {
		slices.SortStableFunc(c.VolumeMounts, func(a, b corev1.VolumeMount) int { return strings.Compare(a.Name, b.Name) })
	}
}

// mergeEnv is kubeadm's MergeKubeadmEnvVars: extra replaces a variable of
// the same name, and the result is sorted by name. kube-vip's rendered
// env keeps its order (sorted false): an extra one replaces in place or
// follows it.
func mergeEnv(env []corev1.EnvVar, extra []nodestate.EnvVar, sorted bool) []corev1.EnvVar {
	out := slices.Clone(env)
	for _, e := range extra {
		v := corev1.EnvVar{Name: e.Name, Value: e.Value, ValueFrom: e.ValueFrom.DeepCopy()}
		if i := slices.IndexFunc(out, func(o corev1.EnvVar) bool { return o.Name == e.Name }); i >= 0 {
			out[i] = v
		} else {
			out = append(out, v)
		}
	}
	if sorted {
		slices.SortStableFunc(out, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	}
	return out
}

// uniqueMountPaths refuses a container with two mounts at one path, which
// kubelet refuses: an extra volume mounted where a rendered one is.
func uniqueMountPaths(c *corev1.Container) error {
	seen := map[string]string{}
	for _, m := range c.VolumeMounts {
		if other, dup := seen[m.MountPath]; dup {
			return fmt.Errorf("extraVolumes.%s: volumes %s and %s are both mounted at %s; kubelet refuses such a pod: mount it elsewhere, or name the extra volume %s to replace the rendered one",
				c.Name, other, m.Name, m.MountPath, other)
		}
		seen[m.MountPath] = m.Name
	}
	return nil
}

// applyPatches applies st's patch files that target name to pod, in
// order, each file's patches in order, with the libraries kubeadm uses
// (util/patches: evanphx/json-patch v4 for json and merge patches,
// apimachinery's strategicpatch with the Pod's schema). The pod goes
// through JSON as in kubeadm; a field a Pod does not have is an error
// here, where kubeadm drops it. A patch may not change what stratum owns
// elsewhere: the pod's and container's names, the image (images), the
// command and args (extraArgs).
func applyPatches(st *nodestate.NodeState, name string, pod *corev1.Pod, seen patchSeen) (*corev1.Pod, error) {
	if st.Patches == nil {
		return pod, nil
	}
	var data []byte
	for _, f := range st.Patches.Files {
		target, typ, err := nodestate.ParsePatchName(f.Name)
		if err != nil || target != name {
			continue // Validate refused a bad name; other components' patches
		}
		if data == nil {
			if data, err = json.Marshal(pod); err != nil {
				return nil, fmt.Errorf("patches: encode %s: %w", name, err)
			}
		}
		patches, err := f.Patches()
		if err != nil {
			return nil, fmt.Errorf("patches %s: %w", f.Name, err)
		}
		for i, p := range patches {
			switch typ {
			case nodestate.PatchJSON:
				var ops jsonpatch.Patch
				if ops, err = jsonpatch.DecodePatch(p); err == nil {
					data, err = ops.Apply(data)
				}
			case nodestate.PatchMerge:
				data, err = jsonpatch.MergePatch(data, p)
			default:
				data, err = strategicpatch.StrategicMergePatch(data, p, corev1.Pod{})
			}
			if err != nil {
				return nil, fmt.Errorf("patches %s: patch %d of type %s does not apply to %s: %w", f.Name, i+1, typ, name, err)
			}
		}
		if seen != nil {
			if err := seen(f.Name, data); err != nil {
				return nil, fmt.Errorf("patches %s: %w", f.Name, err)
			}
		}
	}
	if data == nil {
		return pod, nil
	}
	var out corev1.Pod
	if err := yaml.UnmarshalStrict(data, &out); err != nil {
		return nil, fmt.Errorf("patches of %s: the patched pod is not a Pod: %w", name, err)
	}
	if err := checkPatched(pod, &out); err != nil {
		return nil, fmt.Errorf("patches of %s: %w", name, err)
	}
	return &out, nil
}

// checkPatched refuses a patched pod that changed what other node state
// fields own, or is no longer one container of the component.
func checkPatched(before, after *corev1.Pod) error {
	if after.Name != before.Name || after.Namespace != before.Namespace || after.APIVersion != "v1" || after.Kind != "Pod" {
		return fmt.Errorf("a patch changed the pod's apiVersion, kind, name or namespace (to %s %s %s/%s)", after.APIVersion, after.Kind, after.Namespace, after.Name)
	}
	if len(after.Spec.Containers) == 0 || after.Spec.Containers[0].Name != before.Spec.Containers[0].Name {
		return fmt.Errorf("a patch removed or renamed the %s container: it must stay the pod's first container", before.Name)
	}
	b, a := before.Spec.Containers[0], after.Spec.Containers[0]
	if a.Image != b.Image {
		return fmt.Errorf("a patch sets the image to %s: set images.%s in the node state instead", a.Image, before.Name)
	}
	if !slices.Equal(a.Command, b.Command) || !slices.Equal(a.Args, b.Args) {
		return fmt.Errorf("a patch changes the command line: set flags with extraArgs.%s (and extraArgsOrder) instead, so that plan, status and the health checks see them", before.Name)
	}
	return nil
}
