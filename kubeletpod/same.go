// Package kubeletpod says whether two static pod manifests are the same pod
// to kubelet, and if not, what differs.
//
// kubelet names a static pod by a UID it computes from the file: the
// decoded pod with API defaults applied, hashed, then the node name and the
// file's path (pkg/kubelet/config/common.go applyDefaults). Two files at the
// same path whose decoded, defaulted pods are equal get the same UID, and
// replacing one by the other restarts nothing; any other difference is a
// new pod, and kubelet replaces the running one. Key order, whitespace,
// quoting, `status: {}`, `creationTimestamp: null` and fields written out
// at their default value are no difference.
//
// Same is sound, not complete: when it says two pods are the same, kubelet
// gives them the same UID; it may call two pods different that kubelet
// would not (see Default for the defaults left out).
package kubeletpod

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Decode decodes a static pod file as kubelet's file source does: YAML or
// JSON, unknown fields ignored, apiVersion v1 kind Pod required, a name
// required. It applies no defaults (Default does).
func Decode(b []byte) (*corev1.Pod, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("decode static pod: the file is empty")
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return nil, fmt.Errorf("decode static pod: %w", err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		return nil, fmt.Errorf("decode static pod: want apiVersion v1 kind Pod, got apiVersion %q kind %q", pod.APIVersion, pod.Kind)
	}
	if pod.Name == "" {
		return nil, fmt.Errorf("decode static pod: metadata.name is required")
	}
	return &pod, nil
}

// Defaulted is a deep copy of pod with Default applied and its type meta
// cleared (kubelet decodes into the internal type, which has none).
func Defaulted(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	p.TypeMeta = corev1.Pod{}.TypeMeta
	Default(p)
	return p
}

// Same reports whether kubelet computes the same UID for a and b read from
// the same path on the same node: their defaulted forms are deeply equal,
// quantities in the representation they were written in.
func Same(a, b *corev1.Pod) bool {
	return reflect.DeepEqual(Defaulted(a), Defaulted(b))
}

// Diff lists what differs between a and b as kubelet sees them (after
// Default), one line per difference, each naming the field path and both
// values, with a flag of a container's command or args named as a flag.
// It is empty exactly when Same(a, b) holds: pods that differ only in how
// a value is written (an empty list against an absent one, a quantity's
// representation), which kubelet's hash sees, get one line that says so.
func Diff(a, b *corev1.Pod) []string {
	ma, err1 := toMap(Defaulted(a))
	mb, err2 := toMap(Defaulted(b))
	if err1 != nil || err2 != nil {
		return []string{fmt.Sprintf("cannot compare: %v %v", err1, err2)}
	}
	var out []string
	diffValue("", ma, mb, &out)
	if len(out) == 0 && !Same(a, b) {
		out = append(out, "a value is written differently (an empty list or map against an absent one, or a quantity's representation): kubelet's hash sees it")
	}
	return out
}

func toMap(p *corev1.Pod) (map[string]any, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// diffValue appends the differences between a and b at path to out. A
// list of objects that all carry a "name" is compared by name (volumes,
// mounts, ports, env); a command or args list is compared as flags.
func diffValue(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			diffValue(join(path, k), av[k], bv[k], out)
		}
		return
	case []any:
		bv, ok := b.([]any)
		if !ok {
			break
		}
		if strings.HasSuffix(path, ".command") || strings.HasSuffix(path, ".args") {
			diffArgv(path, av, bv, out)
			return
		}
		if an, bn, ok := byName(av, bv); ok {
			keys := map[string]bool{}
			for k := range an {
				keys[k] = true
			}
			for k := range bn {
				keys[k] = true
			}
			n := len(*out)
			for _, k := range sortedKeys(keys) {
				diffValue(path+"["+k+"]", an[k], bn[k], out)
			}
			if len(*out) == n && !reflect.DeepEqual(av, bv) {
				*out = append(*out, fmt.Sprintf("%s: the same entries in another order", path))
			}
			return
		}
		if len(av) == len(bv) {
			for i := range av {
				diffValue(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i], out)
			}
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("%s: %s -> %s", path, show(a), show(b)))
	}
}

// diffArgv reports a command line's differences: an argument only on one
// side, or a --flag whose values differ. A flag given more than once is
// one flag with its values in order (kube-apiserver takes
// --service-account-issuer several times, and the first one issues), so
// its values in another order, or one of them gone, is named as such.
// Otherwise order matters only when the same arguments are in another
// order.
func diffArgv(path string, a, b []any, out *[]string) {
	flags := func(l []any) (map[string][]string, []string) {
		m := map[string][]string{}
		var order []string
		for _, x := range l {
			s := fmt.Sprint(x)
			k, v, _ := strings.Cut(s, "=")
			if !strings.HasPrefix(k, "-") {
				k, v = s, ""
			}
			if _, dup := m[k]; !dup {
				order = append(order, k)
			}
			m[k] = append(m[k], v)
		}
		return m, order
	}
	am, aorder := flags(a)
	bm, border := flags(b)
	n := len(*out)
	for _, k := range aorder {
		bvv, ok := bm[k]
		switch {
		case !ok:
			*out = append(*out, fmt.Sprintf("%s: %s removed", path, argv(k, am[k])))
		case !slices.Equal(bvv, am[k]):
			line := fmt.Sprintf("%s: %s -> %s", path, argv(k, am[k]), argv(k, bvv))
			if len(bvv) > 1 && slices.Equal(slices.Sorted(slices.Values(bvv)), slices.Sorted(slices.Values(am[k]))) {
				line += " (the same values in another order)"
			}
			*out = append(*out, line)
		}
	}
	for _, k := range border {
		if _, ok := am[k]; !ok {
			*out = append(*out, fmt.Sprintf("%s: %s added", path, argv(k, bm[k])))
		}
	}
	if len(*out) == n && !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("%s: the same arguments in another order", path))
	}
}

// argv writes flag k with its values as the command line gives them:
// --k=v once per value; an argument that is no flag quoted.
func argv(k string, values []string) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = k + "=" + v
		if v == "" && !strings.HasPrefix(k, "-") {
			parts[i] = fmt.Sprintf("%q", k)
		}
	}
	return strings.Join(parts, " ")
}

// byName indexes two lists of objects by their "name" when every element
// of both has one, each once.
func byName(a, b []any) (map[string]any, map[string]any, bool) {
	index := func(l []any) (map[string]any, bool) {
		m := map[string]any{}
		for _, x := range l {
			o, ok := x.(map[string]any)
			if !ok {
				return nil, false
			}
			n, ok := o["name"].(string)
			if !ok || m[n] != nil {
				return nil, false
			}
			m[n] = o
		}
		return m, true
	}
	am, ok1 := index(a)
	bm, ok2 := index(b)
	return am, bm, ok1 && ok2 && (len(a) > 0 || len(b) > 0)
}

func show(v any) string {
	if v == nil {
		return "(absent)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const max = 120
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
