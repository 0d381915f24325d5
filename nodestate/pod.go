package nodestate

// The per-component pod fields kubeadm's configuration carries: extra
// volumes, extra environment variables and resources (patches are in
// patches.go), and their validation.

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// HostPathMount is one extra hostPath volume of a component and its mount,
// kubeadm's HostPathMount field for field.
type HostPathMount struct {
	// Name is the volume's name in the pod (a DNS label); a rendered
	// volume of the same name is replaced by this one.
	Name string `json:"name"`
	// HostPath is the path on the host.
	HostPath string `json:"hostPath"`
	// MountPath is where the container sees it.
	MountPath string `json:"mountPath"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
	// PathType is the hostPath volume's type ("" checks nothing, as
	// kubeadm leaves it when its configuration names none).
	PathType corev1.HostPathType `json:"pathType,omitempty"`
}

// EnvVar is one extra environment variable of a component, kubeadm's
// EnvVar: a value, or a valueFrom that kubelet resolves without the API
// server (fieldRef, resourceFieldRef).
type EnvVar struct {
	// Name is the variable's name.
	Name string `json:"name"`
	// Value is its value.
	Value string `json:"value,omitempty"`
	// ValueFrom takes the value from the pod's fields or resources.
	ValueFrom *corev1.EnvVarSource `json:"valueFrom,omitempty"`
}

// Resources are a container's resource requests and limits, quantities
// as written (kubelet's pod hash sees how a quantity is written, so they
// are kept as text: "100Mi" stays "100Mi").
type Resources struct {
	// Requests maps a resource name (cpu, memory, ...) to a quantity.
	Requests map[string]string `json:"requests,omitempty"`
	// Limits maps a resource name to a quantity.
	Limits map[string]string `json:"limits,omitempty"`
}

// Requirements is r as the pod's resources. r must be valid (Validate).
func (r Resources) Requirements() (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	conv := func(m map[string]string) (corev1.ResourceList, error) {
		if len(m) == 0 {
			return nil, nil
		}
		l := corev1.ResourceList{}
		for k, v := range m {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is not a quantity", k, v)
			}
			l[corev1.ResourceName(k)] = q
		}
		return l, nil
	}
	var err error
	if out.Requests, err = conv(r.Requests); err != nil {
		return out, fmt.Errorf("requests.%w", err)
	}
	if out.Limits, err = conv(r.Limits); err != nil {
		return out, fmt.Errorf("limits.%w", err)
	}
	return out, nil
}

var pathTypes = []corev1.HostPathType{
	corev1.HostPathUnset, corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory,
	corev1.HostPathFileOrCreate, corev1.HostPathFile, corev1.HostPathSocket,
	corev1.HostPathCharDev, corev1.HostPathBlockDev,
}

// noBacksteps reports whether p is absolute and has no ".." element, as
// kubelet requires of a hostPath (it need not be clean: kubeadm writes
// paths as its configuration gives them).
func noBacksteps(p string) bool {
	return filepath.IsAbs(p) && !slices.Contains(strings.Split(p, "/"), "..")
}

func (st *NodeState) validatePodFields(roster []string, bad func(field, format string, a ...any)) {
	component := func(field, c string) bool {
		if !slices.Contains(roster, c) {
			bad(field+"."+c, "not a component this node runs (its roster: %s)", strings.Join(roster, ", "))
			return false
		}
		return true
	}
	for _, c := range slices.Sorted(maps.Keys(st.ExtraVolumes)) {
		if !component("extraVolumes", c) {
			continue
		}
		for i, v := range st.ExtraVolumes[c] {
			f := fmt.Sprintf("extraVolumes.%s[%d]", c, i)
			if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
				bad(f+".name", "%q is not a volume name: %s", v.Name, strings.Join(errs, "; "))
			} else if slices.ContainsFunc(st.ExtraVolumes[c][:i], func(o HostPathMount) bool { return o.Name == v.Name }) {
				bad(f+".name", "%s is named twice", v.Name)
			}
			if !noBacksteps(v.HostPath) {
				bad(f+".hostPath", "must be an absolute path without '..', got %q", v.HostPath)
			}
			if !noBacksteps(v.MountPath) {
				bad(f+".mountPath", "must be an absolute path without '..', got %q", v.MountPath)
			} else if slices.ContainsFunc(st.ExtraVolumes[c][:i], func(o HostPathMount) bool { return o.MountPath == v.MountPath }) {
				bad(f+".mountPath", "%s is mounted twice", v.MountPath)
			}
			if !slices.Contains(pathTypes, v.PathType) {
				bad(f+".pathType", "must be one of DirectoryOrCreate, Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice or empty, got %q", v.PathType)
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(st.ExtraEnvs)) {
		if !component("extraEnvs", c) {
			continue
		}
		for i, e := range st.ExtraEnvs[c] {
			f := fmt.Sprintf("extraEnvs.%s[%d]", c, i)
			if errs := validation.IsEnvVarName(e.Name); e.Name == "" || len(errs) > 0 {
				bad(f+".name", "%q is not an environment variable name: %s", e.Name, strings.Join(errs, "; "))
			} else if slices.ContainsFunc(st.ExtraEnvs[c][:i], func(o EnvVar) bool { return o.Name == e.Name }) {
				bad(f+".name", "%s is set twice", e.Name)
			}
			if e.ValueFrom != nil {
				validateValueFrom(f, e, bad)
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(st.Resources)) {
		if !component("resources", c) {
			continue
		}
		validateResources("resources."+c, st.Resources[c], bad)
	}
	st.validatePatches(roster, bad)
}

// validateValueFrom allows the sources kubelet resolves from the pod
// itself. A static pod cannot read a Secret or ConfigMap: the API server
// refuses a mirror pod that references one, and the pod must run without
// the API server anyway.
func validateValueFrom(f string, e EnvVar, bad func(field, format string, a ...any)) {
	vf := e.ValueFrom
	switch {
	case e.Value != "":
		bad(f, "value and valueFrom are both set; give one")
	case vf.SecretKeyRef != nil || vf.ConfigMapKeyRef != nil:
		bad(f+".valueFrom", "a static pod cannot take a value from a Secret or ConfigMap (the API server refuses its mirror pod, and it must start without the API server); use fieldRef, resourceFieldRef or a value")
	case vf.FieldRef != nil && vf.ResourceFieldRef == nil:
		if vf.FieldRef.FieldPath == "" {
			bad(f+".valueFrom.fieldRef.fieldPath", "required")
		}
	case vf.ResourceFieldRef != nil && vf.FieldRef == nil:
		if vf.ResourceFieldRef.Resource == "" {
			bad(f+".valueFrom.resourceFieldRef.resource", "required")
		}
	default:
		bad(f+".valueFrom", "must set exactly one of fieldRef and resourceFieldRef")
	}
}

func validateResources(f string, r Resources, bad func(field, format string, a ...any)) {
	parse := func(kind string, m map[string]string) map[string]*resource.Quantity {
		out := map[string]*resource.Quantity{}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			field := f + "." + kind + "." + k
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				bad(field, "%q is not a resource name: %s", k, strings.Join(errs, "; "))
				continue
			}
			q, err := resource.ParseQuantity(m[k])
			switch {
			case err != nil:
				bad(field, "%q is not a quantity (like 250m, 1.5 or 128Mi)", m[k])
			case q.Sign() < 0:
				bad(field, "%q is negative", m[k])
			default:
				out[k] = &q
			}
		}
		return out
	}
	req, lim := parse("requests", r.Requests), parse("limits", r.Limits)
	for _, k := range slices.Sorted(maps.Keys(req)) {
		if l, ok := lim[k]; ok && req[k].Cmp(*l) > 0 {
			bad(f+".requests."+k, "%s is more than its limit %s", r.Requests[k], r.Limits[k])
		}
	}
}
