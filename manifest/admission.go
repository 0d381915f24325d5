package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// AdmissionConfigFileName is the base name of the merged admission
// configuration DerivedFiles renders into the node state's ConfigDir.
const AdmissionConfigFileName = "admission-config.yaml"

// DerivedFileMode is the mode of every render-derived file.
const DerivedFileMode fs.FileMode = 0o600

const (
	admissionAPIVersion = "apiserver.config.k8s.io/v1"
	admissionKind       = "AdmissionConfiguration"
)

// admissionConfiguration is the subset of apiserver.config.k8s.io/v1
// AdmissionConfiguration this package reads and writes. A plugin's
// configuration is kept as the JSON it was given: the apiserver, not this
// package, owns its schema.
type admissionConfiguration struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Plugins    []admissionPlugin `json:"plugins"`
}

type admissionPlugin struct {
	Name          string          `json:"name"`
	Path          string          `json:"path,omitempty"`
	Configuration json.RawMessage `json:"configuration,omitempty"`
}

// cisAdmissionPlugins is the cis profile's built-in plugin configuration,
// embedded inline so the apiserver reads one file.
var cisAdmissionPlugins = []admissionPlugin{
	{Name: "EventRateLimit", Configuration: json.RawMessage(`{
		"apiVersion": "eventratelimit.admission.k8s.io/v1alpha1",
		"kind": "Configuration",
		"limits": [{"type": "Server", "qps": 50, "burst": 100}]
	}`)},
	{Name: "PodSecurity", Configuration: json.RawMessage(`{
		"apiVersion": "pod-security.admission.config.k8s.io/v1",
		"kind": "PodSecurityConfiguration",
		"defaults": {
			"enforce": "baseline", "enforce-version": "latest",
			"audit": "restricted", "audit-version": "latest",
			"warn": "restricted", "warn-version": "latest"
		},
		"exemptions": {"usernames": [], "runtimeClasses": [], "namespaces": ["kube-system"]}
	}`)},
}

// parseAdmission strictly decodes an AdmissionConfiguration file: not YAML,
// another kind or apiVersion, an unknown field, a plugin without a name, or
// two plugins of one name are errors.
func parseAdmission(b []byte) (*admissionConfiguration, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errEmpty
	}
	var ac admissionConfiguration
	if err := yaml.UnmarshalStrict(b, &ac); err != nil {
		return nil, fmt.Errorf("not a valid %s: %w", admissionKind, err)
	}
	if ac.APIVersion != admissionAPIVersion || ac.Kind != admissionKind {
		return nil, fmt.Errorf("must be an %s %s, got apiVersion %q kind %q", admissionAPIVersion, admissionKind, ac.APIVersion, ac.Kind)
	}
	seen := map[string]bool{}
	for i, p := range ac.Plugins {
		if p.Name == "" {
			return nil, fmt.Errorf("plugins[%d]: name is required", i)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("plugins[%d]: plugin %q is listed twice", i, p.Name)
		}
		seen[p.Name] = true
		if p.Path == "" && len(p.Configuration) == 0 {
			return nil, fmt.Errorf("plugins[%d] (%s): needs a path or a configuration", i, p.Name)
		}
		if p.Path != "" && len(p.Configuration) != 0 {
			return nil, fmt.Errorf("plugins[%d] (%s): has both a path and a configuration; give one", i, p.Name)
		}
	}
	return &ac, nil
}

// mergeAdmission is the cis built-ins with file's plugins over them: a file
// plugin replaces the built-in of the same name and is added otherwise. The
// result is sorted by plugin name.
func mergeAdmission(file *admissionConfiguration) []admissionPlugin {
	byName := map[string]admissionPlugin{}
	for _, p := range cisAdmissionPlugins {
		byName[p.Name] = p
	}
	for _, p := range file.Plugins {
		byName[p.Name] = p
	}
	out := make([]admissionPlugin, 0, len(byName))
	for _, p := range byName {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// renderAdmission is the merged admission configuration's bytes. yaml
// encoding sorts every map key, so equal inputs give equal bytes.
func renderAdmission(admissionFile []byte) ([]byte, error) {
	file, err := parseAdmission(admissionFile)
	if err != nil {
		return nil, err
	}
	out := admissionConfiguration{APIVersion: admissionAPIVersion, Kind: admissionKind, Plugins: mergeAdmission(file)}
	b, err := yaml.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", admissionKind, err)
	}
	return b, nil
}

func admissionConfigPath(st *nodestate.NodeState) string {
	return filepath.Join(st.ConfigDir, AdmissionConfigFileName)
}

// DerivedFile is one file the render derives besides the manifests. Path is
// absolute and outside the manifest directory (kubelet would parse a file
// there as a pod); the apiserver's argv names it.
type DerivedFile struct {
	Path string
	Data []byte
	Mode fs.FileMode
}

// DerivedFiles renders the files st's manifests name besides the node
// state's own inputs, sorted by Path. It is pure, like Render. The default
// profile derives none; the cis profile derives
// <ConfigDir>/admission-config.yaml (mode 0600): an apiserver.config.k8s.io/v1
// AdmissionConfiguration holding the profile's built-in PodSecurity and
// EventRateLimit configuration, with the plugins of the profile's admission
// file replacing a built-in of the same name and added otherwise, sorted by
// plugin name. A malformed admission file is an error naming the file.
func DerivedFiles(st *nodestate.NodeState, prof Profile) ([]DerivedFile, error) {
	if st.Profile.Name != nodestate.ProfileCIS {
		return nil, nil
	}
	if err := prof.requireCIS(); err != nil {
		return nil, fmt.Errorf("derived files: %w", err)
	}
	b, err := renderAdmission(prof.AdmissionConfig)
	if err != nil {
		return nil, fmt.Errorf("derived files: profile.admissionConfigFile %s: %w", st.Profile.AdmissionConfigFile, err)
	}
	return []DerivedFile{{Path: admissionConfigPath(st), Data: b, Mode: DerivedFileMode}}, nil
}

// DerivedPaths is every path a derived file can have for st's ConfigDir,
// whatever the profile, sorted: the set a snapshot may hold and a restore
// may write. A fresh slice per call.
func DerivedPaths(st *nodestate.NodeState) []string {
	return []string{admissionConfigPath(st)}
}

// IsDerivedPath reports whether path is one DerivedPaths lists for st.
func IsDerivedPath(st *nodestate.NodeState, path string) bool {
	for _, p := range DerivedPaths(st) {
		if p == path {
			return true
		}
	}
	return false
}

func joinNames(names []string) string { return strings.Join(names, ", ") }
