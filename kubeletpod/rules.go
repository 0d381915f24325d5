package kubeletpod

// This file holds what a kubelet refuses, or silently drops, in a static pod
// file: the rules a rendered manifest is checked against before an upgrade
// writes it (engine's StaticPodKubelet pre-flight check). Each rule is
// pinned on the real kubelet's own code by the tests of the tool modules
// (internal/harness/tools/*/kubeletrules), on the cases of
// testdata/kubelet-rules, which rules_test.go runs here.

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Problem is one thing in a static pod file that a kubelet refuses (no pod
// runs from the file) or drops (the pod runs without it).
type Problem struct {
	// Refused: kubelet refuses the whole file. Otherwise it drops a field
	// and runs the pod without it.
	Refused bool
	// What is kubelet's reason: the API resource the pod references
	// ("secrets", "configmaps (via projected volumes)"), as kubelet's
	// "static pods may not reference <what>" names it, or the path of the
	// field kubelet does not know ("spec.hostNetwrk") or finds invalid
	// ("spec.containers[0].restartPolicy").
	What string
	// Message says it all for an operator.
	Message string
}

func (p Problem) String() string { return p.Message }

// ErrNotAPod is wrapped by Check's error for a file that is not a pod
// kubelet could read at all.
var ErrNotAPod = errors.New("not a static pod kubelet can read")

// Check returns what kubelet of kubeletVersion ("v1.37.2", "1.37") would
// refuse or drop in the static pod file b, nil when nothing. The rules:
//   - a field kubelet's pod type does not know is dropped: kubelet decodes
//     static pods leniently, so a misspelled or too-new field is lost
//     silently (the pod runs without hostNetwork, say). Known is what this
//     program's Kubernetes API knows (k8s.io/api v0.34), which every
//     supported kubelet (1.34 and later) knows too; a field newer than that
//     is reported as well, and can be let through by ignoring the check;
//   - a pod that references an API object (a Secret, ConfigMap, service
//     account, claim, or a volume that needs one) is refused: by default
//     from 1.34 (the PreventStaticPodAPIReferences gate, beta and on), with
//     no way to turn it off from 1.37, where the gate is gone;
//   - a container's own restartPolicy is refused by kubelet 1.34 on a
//     regular container, and on an init container unless Always (a
//     sidecar); from 1.35 Always, OnFailure and Never are valid on either
//     (see restartPolicies).
//
// An error (wrapping ErrNotAPod) is a file kubelet cannot decode, or an
// unknown version.
func Check(b []byte, kubeletVersion string) ([]Problem, error) {
	v, err := version.ParseGeneric(kubeletVersion)
	if err != nil || v.Major() != 1 {
		return nil, fmt.Errorf("kubelet version %q: want 1.x, such as v1.37.2", kubeletVersion)
	}
	minor := fmt.Sprintf("1.%d", v.Minor())
	pod, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotAPod, err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotAPod, err)
	}
	var strict corev1.Pod
	strictErrs, err := kjson.UnmarshalStrict(j, &strict, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotAPod, err)
	}
	var out []Problem
	for _, e := range strictErrs {
		field := unknownField(e)
		out = append(out, Problem{What: field, Message: fmt.Sprintf(
			"pod %s: kubelet %s does not know the field %s and drops it: the pod would run without it (misspelled, or newer than Kubernetes v1.34?)",
			pod.Name, minor, field)})
	}
	out = append(out, restartPolicies(pod, v.Minor())...)
	if what := apiReference(pod); what != "" {
		gate := "by default from 1.34 (feature gate PreventStaticPodAPIReferences), and always from 1.37"
		out = append(out, Problem{Refused: true, What: what, Message: fmt.Sprintf(
			"pod %s references %s: kubelet %s refuses static pods that reference API objects (%s), so it would not run this pod; use hostPath volumes and plain env values",
			pod.Name, what, minor, gate)})
	}
	return out, nil
}

// restartPolicies are kubelet 1.<minor>'s refusals of a container's own
// restartPolicy, by its validation of a static pod: up to 1.34
// that runs with no validation options, so the ContainerRestartRules
// fields are refused even with the gate on; from 1.35 (k/k#135031) with
// the options the gates call for, and the gate is on by default.
func restartPolicies(pod *corev1.Pod, minor uint) []Problem {
	var out []Problem
	check := func(kind string, i int, c corev1.Container) {
		if c.RestartPolicy == nil {
			return
		}
		p := *c.RestartPolicy
		path := fmt.Sprintf("spec.%s[%d].restartPolicy", kind, i)
		var why, fix string
		switch {
		case minor <= 34 && kind == "containers":
			why = fmt.Sprintf("refuses a restartPolicy on a regular container (%s: %s; it may be set only on an init container until kubelet 1.35)", path, p)
			fix = "remove it from the patch that sets it, and set it again once the node's kubelet runs 1.35 or later (the kubelet is upgraded after the control plane)"
		case minor <= 34 && p != corev1.ContainerRestartPolicyAlways:
			why = fmt.Sprintf("refuses %s: %s on an init container (only Always, a sidecar, until kubelet 1.35)", path, p)
			fix = "remove it from the patch that sets it, and set it again once the node's kubelet runs 1.35 or later (the kubelet is upgraded after the control plane)"
		case p != corev1.ContainerRestartPolicyAlways && p != corev1.ContainerRestartPolicyOnFailure && p != corev1.ContainerRestartPolicyNever:
			why = fmt.Sprintf("refuses %s: %q (valid: Always, OnFailure, Never)", path, p)
			fix = "correct it in the patch that sets it"
		default:
			return
		}
		out = append(out, Problem{Refused: true, What: path, Message: fmt.Sprintf(
			"pod %s: kubelet 1.%d %s, so it would not run this pod: %s",
			pod.Name, minor, why, fix)})
	}
	for i, c := range pod.Spec.InitContainers {
		check("initContainers", i, c)
	}
	for i, c := range pod.Spec.Containers {
		check("containers", i, c)
	}
	return out
}

// unknownField is the path a strict decoding error names: `unknown field
// "spec.hostNetwrk"` gives spec.hostNetwrk.
func unknownField(err error) string {
	s := err.Error()
	if i := strings.Index(s, `"`); i >= 0 {
		if j := strings.LastIndex(s, `"`); j > i {
			return s[i+1 : j]
		}
	}
	return s
}

// apiReference is what kubelet's podutil.HasAPIObjectReference names for
// pod (the resource in "static pods may not reference <resource>"), in its
// order, or "" when the pod references no API object.
func apiReference(pod *corev1.Pod) string {
	spec := &pod.Spec
	// v1's deprecated serviceAccount becomes serviceAccountName when
	// that is empty (the conversion to the internal pod kubelet checks).
	if spec.ServiceAccountName != "" || spec.DeprecatedServiceAccount != "" {
		return "serviceaccounts"
	}
	secrets, configMaps := false, false
	for _, s := range spec.ImagePullSecrets {
		secrets = secrets || s.Name != ""
	}
	for _, c := range containers(spec) {
		for _, e := range c.EnvFrom {
			secrets = secrets || (e.SecretRef != nil && e.SecretRef.Name != "")
			configMaps = configMaps || (e.ConfigMapRef != nil && e.ConfigMapRef.Name != "")
		}
		for _, e := range c.Env {
			if f := e.ValueFrom; f != nil {
				secrets = secrets || (f.SecretKeyRef != nil && f.SecretKeyRef.Name != "")
				configMaps = configMaps || (f.ConfigMapKeyRef != nil && f.ConfigMapKeyRef.Name != "")
			}
		}
	}
	for _, v := range spec.Volumes {
		secrets = secrets || volumeSecret(v.VolumeSource)
		configMaps = configMaps || volumeConfigMap(v.VolumeSource)
	}
	switch {
	case secrets:
		return "secrets"
	case configMaps:
		return "configmaps"
	case len(spec.ResourceClaims) > 0:
		return "resourceclaims"
	}
	for _, v := range spec.Volumes {
		if what := volumeReference(v); what != "" {
			return what
		}
	}
	return ""
}

// containers are the pod's containers of every kind.
func containers(spec *corev1.PodSpec) []corev1.Container {
	out := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, e := range spec.EphemeralContainers {
		out = append(out, corev1.Container(e.EphemeralContainerCommon))
	}
	return out
}

// volumeSecret: the volume names a Secret (podutil.VisitPodSecretNames).
func volumeSecret(s corev1.VolumeSource) bool {
	switch {
	case s.AzureFile != nil:
		return s.AzureFile.SecretName != ""
	case s.CephFS != nil:
		return s.CephFS.SecretRef != nil && s.CephFS.SecretRef.Name != ""
	case s.Cinder != nil:
		return s.Cinder.SecretRef != nil && s.Cinder.SecretRef.Name != ""
	case s.FlexVolume != nil:
		return s.FlexVolume.SecretRef != nil && s.FlexVolume.SecretRef.Name != ""
	case s.Projected != nil:
		for _, p := range s.Projected.Sources {
			if p.Secret != nil && p.Secret.Name != "" {
				return true
			}
		}
	case s.RBD != nil:
		return s.RBD.SecretRef != nil && s.RBD.SecretRef.Name != ""
	case s.Secret != nil:
		return s.Secret.SecretName != ""
	case s.ScaleIO != nil:
		return s.ScaleIO.SecretRef != nil && s.ScaleIO.SecretRef.Name != ""
	case s.ISCSI != nil:
		return s.ISCSI.SecretRef != nil && s.ISCSI.SecretRef.Name != ""
	case s.StorageOS != nil:
		return s.StorageOS.SecretRef != nil && s.StorageOS.SecretRef.Name != ""
	case s.CSI != nil:
		return s.CSI.NodePublishSecretRef != nil && s.CSI.NodePublishSecretRef.Name != ""
	}
	return false
}

// volumeConfigMap: the volume names a ConfigMap
// (podutil.VisitPodConfigmapNames).
func volumeConfigMap(s corev1.VolumeSource) bool {
	switch {
	case s.Projected != nil:
		for _, p := range s.Projected.Sources {
			if p.ConfigMap != nil && p.ConfigMap.Name != "" {
				return true
			}
		}
	case s.ConfigMap != nil:
		return s.ConfigMap.Name != ""
	}
	return false
}

// volumeReference is what a volume of a kind that needs the API names
// (HasAPIObjectReference's switch), "" for a kind a static pod may use.
func volumeReference(v corev1.Volume) string {
	s := v.VolumeSource
	switch {
	case s.AWSElasticBlockStore != nil, s.AzureDisk != nil, s.CephFS != nil, s.Cinder != nil,
		s.DownwardAPI != nil, s.EmptyDir != nil, s.FC != nil, s.FlexVolume != nil, s.Flocker != nil, s.GCEPersistentDisk != nil,
		s.GitRepo != nil, s.HostPath != nil, s.Image != nil, s.ISCSI != nil, s.NFS != nil, s.PhotonPersistentDisk != nil,
		s.PortworxVolume != nil, s.Quobyte != nil, s.RBD != nil, s.ScaleIO != nil, s.StorageOS != nil, s.VsphereVolume != nil:
		return ""
	case s.ConfigMap != nil:
		return "configmaps (via configmap volumes)"
	case s.Secret != nil:
		return "secrets (via secret volumes)"
	case s.CSI != nil:
		return "csidrivers (via CSI volumes)"
	case s.Glusterfs != nil:
		return "endpoints (via glusterFS volumes)"
	case s.PersistentVolumeClaim != nil:
		return "persistentvolumeclaims"
	case s.Ephemeral != nil:
		return "persistentvolumeclaims (via ephemeral volumes)"
	case s.AzureFile != nil:
		return "secrets (via azureFile volumes)"
	case s.Projected != nil:
		for _, p := range s.Projected.Sources {
			switch {
			case p.ConfigMap != nil:
				return "configmaps (via projected volumes)"
			case p.Secret != nil:
				return "secrets (via projected volumes)"
			case p.ServiceAccountToken != nil:
				return "serviceaccounts (via projected volumes)"
			case p.ClusterTrustBundle != nil:
				return "clustertrustbundles"
			case p.PodCertificate != nil:
				return "podcertificates"
			}
		}
		return ""
	}
	return fmt.Sprintf("volume %q of a kind unknown here", v.Name)
}
