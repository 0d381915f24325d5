package adopt

// The pod fields of adoption: what kubeadm's extraVolumes, extraEnvs and
// patches (or a hand edit) put into a manifest becomes the node state's
// extraVolumes, extraEnvs and resources, and whatever else kubelet sees
// beyond the render is kept as a strategic-merge patch, so that the
// render of the adopted state is, to kubelet, the pod it runs.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// kubeadmCACertDirs are the CA certificate directories kubeadm mounts into
// kube-apiserver and kube-controller-manager beside /etc/ssl/certs, those
// of them that exist on the host (caCertsExtraVolumePaths in
// cmd/kubeadm/app/phases/controlplane/volumes.go, the same in kubeadm
// 1.34 to 1.37), each as a read-only DirectoryOrCreate volume named after
// its path. Every other volume is an extra volume of its own component.
var kubeadmCACertDirs = []string{"/etc/pki/ca-trust", "/etc/pki/tls/certs", "/etc/ca-certificates", "/usr/share/ca-certificates", "/usr/local/share/ca-certificates"}

// AdoptedPatchSuffix names the patch adoption writes for a component's
// residue: <component>-adopted+strategic.yaml.
const AdoptedPatchSuffix = "-adopted+strategic.yaml"

// addPodFields sets st's extraVolumes, extraEnvs and resources of every
// component from what its running pod has beyond the render of st, and
// then a patch of each component whose render is still another pod to
// kubelet: the rest of the difference (not the command line, which only
// extraArgs carry; a difference there is left for Check to report).
func addPodFields(src *Source, st *nodestate.NodeState) error {
	for _, c := range src.Components() {
		want, err := renderBare(st, c)
		if err != nil {
			return refuse("%s: %v", src.Files[c], err)
		}
		running := src.Pods[c]
		if vols := extraVolumesOf(running, want); len(vols) > 0 {
			setMap(&st.ExtraVolumes, c, vols)
		}
		if envs := extraEnvsOf(running, want); len(envs) > 0 {
			setMap(&st.ExtraEnvs, c, envs)
		}
		rc, wc := running.Spec.Containers[0].Resources, want.Spec.Containers[0].Resources
		if !reflect.DeepEqual(rc, wc) && len(rc.Claims) == 0 {
			setMap(&st.Resources, c, resourcesAsWritten(src.Raw[c]))
		}
		if resolve.Validate(st) != nil {
			// Something the fields refuse (a volume name that is no DNS
			// label, an env name kubelet's newer rules allow): the
			// residue patch carries this component's differences instead.
			delete(st.ExtraVolumes, c)
			delete(st.ExtraEnvs, c)
			delete(st.Resources, c)
		}
	}
	if len(st.ExtraVolumes) == 0 {
		st.ExtraVolumes = nil
	}
	if len(st.ExtraEnvs) == 0 {
		st.ExtraEnvs = nil
	}
	if len(st.Resources) == 0 {
		st.Resources = nil
	}
	if err := resolve.Validate(st); err != nil {
		return refuse("the state derived from %s is not valid: %v", src.Dir, err)
	}
	for _, c := range src.Components() {
		if err := addResidue(src, st, c); err != nil {
			return err
		}
	}
	return nil
}

func setMap[V any](m *map[string]V, k string, v V) {
	if *m == nil {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// renderBare renders c from st as adoption writes it: without the
// stratum annotations of a render (the start-only inputs digest is
// recorded as the one the render would annotate, so the annotation is
// left out; Check records the files' real digest).
func renderBare(st *nodestate.NodeState, c string) (*corev1.Pod, error) {
	tmp := st.Clone()
	d, err := manifest.InputsDigest(tmp, manifest.Profile{}, c)
	if err != nil {
		return nil, err
	}
	setMap(&tmp.AdoptedInputs, c, d)
	return manifest.Render(tmp, manifest.Profile{}, c, "")
}

// extraVolumesOf is every hostPath volume of running, with its mount, that
// want does not have as running has it, in running's order.
func extraVolumesOf(running, want *corev1.Pod) []nodestate.HostPathMount {
	var out []nodestate.HostPathMount
	mounts := running.Spec.Containers[0].VolumeMounts
	for _, v := range running.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		i := slices.IndexFunc(mounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name })
		if i < 0 {
			continue // a volume without a mount: the residue patch keeps it
		}
		if sameVolume(want, v, mounts[i]) {
			continue
		}
		m := mounts[i]
		hv := nodestate.HostPathMount{Name: v.Name, HostPath: v.HostPath.Path, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if v.HostPath.Type != nil {
			hv.PathType = *v.HostPath.Type
		}
		out = append(out, hv)
	}
	return out
}

func sameVolume(pod *corev1.Pod, v corev1.Volume, m corev1.VolumeMount) bool {
	i := slices.IndexFunc(pod.Spec.Volumes, func(o corev1.Volume) bool { return o.Name == v.Name })
	j := slices.IndexFunc(pod.Spec.Containers[0].VolumeMounts, func(o corev1.VolumeMount) bool { return o.Name == v.Name })
	return i >= 0 && j >= 0 && reflect.DeepEqual(pod.Spec.Volumes[i], v) && reflect.DeepEqual(pod.Spec.Containers[0].VolumeMounts[j], m)
}

// extraEnvsOf is every environment variable of running that want does not
// have with its value, in running's order, but one taken from a Secret or
// ConfigMap (the node state refuses those; the residue patch keeps it).
func extraEnvsOf(running, want *corev1.Pod) []nodestate.EnvVar {
	var out []nodestate.EnvVar
	for _, e := range running.Spec.Containers[0].Env {
		if slices.ContainsFunc(want.Spec.Containers[0].Env, func(o corev1.EnvVar) bool { return reflect.DeepEqual(o, e) }) {
			continue
		}
		if vf := e.ValueFrom; vf != nil && (vf.SecretKeyRef != nil || vf.ConfigMapKeyRef != nil || vf.FieldRef != nil && vf.ResourceFieldRef != nil) {
			continue
		}
		out = append(out, nodestate.EnvVar{Name: e.Name, Value: e.Value, ValueFrom: e.ValueFrom.DeepCopy()})
	}
	return out
}

// resourcesAsWritten is the first container's resources as raw's text
// writes them: kubelet's hash sees a quantity's spelling ("0.5" is not
// "500m" to it), which a decoded quantity does not keep.
func resourcesAsWritten(raw []byte) nodestate.Resources {
	var doc struct {
		Spec struct {
			Containers []struct {
				Resources struct {
					Requests map[string]any `json:"requests"`
					Limits   map[string]any `json:"limits"`
				} `json:"resources"`
			} `json:"containers"`
		} `json:"spec"`
	}
	var out nodestate.Resources
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return out
	}
	// Numbers as written: 1073741824 must not become 1.073741824e+09.
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil || len(doc.Spec.Containers) == 0 {
		return out
	}
	text := func(m map[string]any) map[string]string {
		if len(m) == 0 {
			return nil
		}
		r := map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			r[k] = fmt.Sprint(m[k])
		}
		return r
	}
	r := doc.Spec.Containers[0].Resources
	out.Requests, out.Limits = text(r.Requests), text(r.Limits)
	return out
}

// addResidue adds to st, when c's render is still another pod to kubelet
// than the running one, a strategic-merge patch from the render to the
// running pod, with the command line left as rendered (only extraArgs
// carry it). It is kept only when the patched render is then the running
// pod to kubelet; otherwise Check reports the difference.
func addResidue(src *Source, st *nodestate.NodeState, c string) error {
	want, err := renderBare(st, c)
	if err != nil {
		return refuse("%s: %v", src.Files[c], err)
	}
	running := src.Pods[c]
	if kubeletpod.Same(running, want) {
		return nil
	}
	target := running.DeepCopy()
	target.Spec.Containers[0].Command = want.Spec.Containers[0].Command
	target.Spec.Containers[0].Args = want.Spec.Containers[0].Args
	from, err := json.Marshal(want)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", c, err)
	}
	to, err := json.Marshal(target)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", c, err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(from, to, corev1.Pod{})
	if err != nil {
		return fmt.Errorf("adopt %s: the difference to the render as a patch: %w", c, err)
	}
	content, err := yaml.JSONToYAML(patch)
	if err != nil {
		return fmt.Errorf("adopt %s: %w", c, err)
	}
	tried := st.Clone()
	if tried.Patches == nil {
		tried.Patches = &nodestate.Patches{}
	}
	tried.Patches.Files = append(tried.Patches.Files, nodestate.PatchFile{Name: c + AdoptedPatchSuffix, Content: string(content)})
	if resolve.Validate(tried) != nil {
		return nil
	}
	if got, err := renderBare(tried, c); err != nil || !kubeletpod.Same(running, got) {
		return nil // Check names what still differs
	}
	st.Patches = tried.Patches
	return nil
}
