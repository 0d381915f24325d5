// Package manifest renders and stores the control-plane static pod
// manifests of one node.
//
// The render half (Render, Encode, DerivedFiles, Target) is pure: a
// nodestate.NodeState plus the Profile file contents LoadProfile read give
// the same bytes every time, kubeadm's layout and flags, with every hostPath
// mounted at its own path so argv is valid on the host as well. The store
// half writes those bytes into the kubelet's staticPodPath as its sole
// writer.
package manifest

import (
	"bytes"
	"fmt"
	"path"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
	"github.com/ciq/stratum-upgrade/resolve"
	"github.com/ciq/stratum-upgrade/versions"
)

// RestartedAtAnnotation is bumped by Restart; kubelet recreates a static pod
// whenever its manifest content changes, and the annotation is the one field
// whose only job is to change.
const RestartedAtAnnotation = "stratum.ciq.com/restarted-at"

// AuditPolicyAnnotation carries the sha256 of the node profile's plain
// config files, in order, on the kube-apiserver pod: for the cis profile,
// its audit policy. The apiserver reads such a file only when it starts,
// and its manifest names the file without its contents, so a changed file
// would otherwise leave the running apiserver on the old one.
const AuditPolicyAnnotation = "stratum.ciq.com/audit-policy-sha256"

// AdmissionConfigAnnotation carries, on the kube-apiserver pod, a sha256 of
// the node profile's AdmissionConfiguration file, the files its plugins name
// with path:, and the merged configuration DerivedFiles renders from them.
// The apiserver reads the merged file only when it starts, and its manifest
// names that file without its contents, so a changed admission body would
// otherwise leave the running apiserver on the old policy. It is an
// annotation of its own so AuditPolicyAnnotation keeps the value it had.
const AdmissionConfigAnnotation = "stratum.ciq.com/admission-config-sha256"

// The annotations kubeadm puts on its etcd and kube-apiserver pods; tools
// that find the control plane through the mirror pods (kubeadm's own etcd
// client among them) read these.
const (
	EtcdAdvertiseClientURLsAnnotation   = "kubeadm.kubernetes.io/etcd.advertise-client-urls"
	APIServerAdvertiseAddressAnnotation = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"
)

// checkRoster reports whether name is a component st renders, and if not
// says why, naming the roster.
func checkRoster(st *nodestate.NodeState, name string) error {
	roster := NamesFor(st)
	if !IsName(name) {
		return fmt.Errorf("%q is not a component (known: %s; this node renders %s)", name, joinNames(Names), joinNames(roster))
	}
	for _, n := range roster {
		if n == name {
			return nil
		}
	}
	why := ""
	switch {
	case st.IsStopped(name):
		why = ": it is stopped (the node state's stopped list)"
	case name == nodestate.KubeVIP:
		why = ": kube-vip runs only on a node whose state sets vip"
	}
	return fmt.Errorf("%s is not in this node's roster (%s)%s", name, joinNames(roster), why)
}

// Render builds component name's static pod from st and prof. It is pure:
// it reads no file, no clock and no environment, and iterates no map
// unordered, so the same inputs always give the same pod (and Encode the
// same bytes). restartedAt is RestartedAtAnnotation's value; "" renders no
// such annotation. Every pod carries InputsAnnotation, the hash of its
// start-only input files as prof.Inputs holds them, except an adopted
// component's while that hash is still st.AdoptedInputs' (InputsDigest).
//
// The node state's extraVolumes, extraEnvs, resources and patches of name
// are applied as kubeadm applies its configuration's (podfields.go), the
// stratum annotations after the patches.
//
// It is an error to ask for a name outside NamesFor(st) (the error names the
// roster), for a component with no image in st, for an invalid st, for
// patches that do not apply or change what other fields own, and for
// a cis state whose prof lacks the profile's files (read them with
// LoadProfile) or holds a malformed admission file.
func Render(st *nodestate.NodeState, prof Profile, name, restartedAt string) (*corev1.Pod, error) {
	return render(st, prof, name, restartedAt, nil)
}

// render is Render; seen, if not nil, is called with the pod after each
// patch file (pullpolicy.go).
func render(st *nodestate.NodeState, prof Profile, name, restartedAt string, seen patchSeen) (*corev1.Pod, error) {
	if err := checkRoster(st, name); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	n := resolve.Resolve(st)
	if n.Image(name) == "" {
		return nil, fmt.Errorf("render %s: no image: set images.%s in the node state", name, name)
	}
	if err := resolve.Validate(st); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	if st.Profile.Name == nodestate.ProfileCIS && name == nodestate.KubeAPIServer {
		if err := prof.requireCIS(); err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
		if _, err := renderAdmission(prof); err != nil {
			return nil, fmt.Errorf("render %s: profile.admissionConfigFile %s: %w", name, st.Profile.AdmissionConfigFile, err)
		}
	}
	v, err := versions.Of(n, name)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	rc := n.Components[name]
	if err := checkArgs(st, name, v); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	var pod *corev1.Pod
	switch name {
	case nodestate.Etcd:
		pod = etcdPod(st, rc)
	case nodestate.KubeAPIServer:
		pod = apiServerPod(st, prof, rc)
	case nodestate.ControllerManager:
		pod = controllerManagerPod(st, rc)
	case nodestate.Scheduler:
		pod = schedulerPod(st, rc)
	case nodestate.KubeVIP:
		pod = kubeVIPPod(st, rc)
	}
	if pod, err = applyPodFields(st, name, pod, seen); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	// An adopted component whose files are as they were at adoption keeps
	// the annotation-free pod the other tool wrote (NodeState.AdoptedInputs).
	if digest := prof.Inputs.hash(inputPaths(st, name, v)); st.AdoptedInputs[name] != digest {
		annotate(pod, InputsAnnotation, digest)
	}
	if restartedAt != "" {
		annotate(pod, RestartedAtAnnotation, restartedAt)
	}
	return pod, nil
}

// annotate sets annotation k to v on pod, making the map only then: a pod
// with no annotation has none, as kubeadm writes it (kubelet's hash tells
// an empty map from an absent one).
func annotate(pod *corev1.Pod, k, v string) {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[k] = v
}

// InputsDigest is the hash of component name's start-only input files as
// prof.Inputs holds them: InputsAnnotation's value, and what
// NodeState.AdoptedInputs records at adoption. A name outside NamesFor(st)
// is an error.
func InputsDigest(st *nodestate.NodeState, prof Profile, name string) (string, error) {
	if err := checkRoster(st, name); err != nil {
		return "", fmt.Errorf("inputs of %s: %w", name, err)
	}
	v, err := versions.Of(resolve.Resolve(st), name)
	if err != nil {
		return "", fmt.Errorf("inputs of %s: %w", name, err)
	}
	return prof.Inputs.hash(inputPaths(st, name, v)), nil
}

// Encode serializes pod as a manifest with sigs.k8s.io/yaml: struct fields in
// declaration order, map keys sorted, so equal pods give equal bytes.
func Encode(pod *corev1.Pod) ([]byte, error) {
	b, err := yaml.Marshal(pod)
	if err != nil {
		return nil, fmt.Errorf("encode pod %s: %w", pod.Name, err)
	}
	return b, nil
}

// RenderBytes is Encode(Render(st, prof, name, restartedAt)).
func RenderBytes(st *nodestate.NodeState, prof Profile, name, restartedAt string) ([]byte, error) {
	pod, err := Render(st, prof, name, restartedAt)
	if err != nil {
		return nil, err
	}
	return Encode(pod)
}

// MatchesRender reports whether b, a manifest as on disk, is exactly the
// render of component name from st, with b's own restarted-at stamp (a
// restart changes only that). False means it was edited by hand (or is
// another node state's, or does not decode), or that a start-only input
// file changed since it was written (InputsOnly tells that case apart:
// `status` shows it as "inputs-changed"); otherwise `status` shows it as
// "differs", and `plan` says the upgrade puts it back.
func MatchesRender(st *nodestate.NodeState, name string, b []byte) bool {
	pod, err := DecodePod(b)
	if err != nil {
		return false
	}
	prof, err := LoadProfile(st)
	if err != nil {
		return false
	}
	want, err := RenderBytes(st, prof, name, RestartedAt(pod))
	return err == nil && bytes.Equal(want, b)
}

// DecodePod strictly decodes a manifest: an unknown or duplicated field is
// an error, and so is anything but a kind Pod, apiVersion v1 object with at
// least one container. It applies no API defaults.
func DecodePod(b []byte) (*corev1.Pod, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("decode pod: %w", errEmpty)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		return nil, fmt.Errorf("decode pod: must be apiVersion v1 kind Pod, got apiVersion %q kind %q", pod.APIVersion, pod.Kind)
	}
	if len(pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("decode pod %s: no containers", pod.Name)
	}
	return &pod, nil
}

// RestartedAt is pod's RestartedAtAnnotation, "" when it has none.
func RestartedAt(pod *corev1.Pod) string {
	return pod.Annotations[RestartedAtAnnotation]
}

// Target is how proc finds and checks component name on st's node: argv[0]'s
// basename, and the health URL of the component's startup probe (the check
// that says it has come up), derived from the same flags the manifest
// carries. kube-vip has no listener and so no Health. A name outside
// NamesFor(st) is an error.
func Target(st *nodestate.NodeState, name string) (proc.Target, error) {
	if err := checkRoster(st, name); err != nil {
		return proc.Target{}, fmt.Errorf("target %s: %w", name, err)
	}
	v, err := versions.Of(resolve.Resolve(st), name)
	if err != nil {
		return proc.Target{}, fmt.Errorf("target %s: %w", name, err)
	}
	t := proc.Target{Name: name, Binary: binaryName(name)}
	if ep, ok := probeFor(st, name, componentArgs(st, name, v), v); ok {
		t.Health = ep.url(ep.startup)
	}
	return t, nil
}

func binaryName(name string) string {
	if name == nodestate.KubeVIP {
		return path.Base(kubeVIPCommand)
	}
	return name
}
