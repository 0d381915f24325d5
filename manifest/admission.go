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

	"github.com/ciq/stratum-upgrade/durable"
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

// resolveAdmissionPath is the file the apiserver reads for a plugin's
// path: p in the AdmissionConfiguration at admissionFile: p itself when
// absolute, else p joined to admissionFile's directory
// (k8s.io/apiserver/pkg/admission/config.go, ReadAdmissionConfiguration).
func resolveAdmissionPath(admissionFile, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(admissionFile), p)
}

// readAdmissionPaths reads the file of every plugin of ac, the
// AdmissionConfiguration at admissionFile, that is configured by path:,
// keyed by the path as written. A file is read as LoadProfile reads the
// profile's own files (durable.ReadRegular: a symlink at its last element,
// a directory or a device is refused) and must hold a plugin configuration
// (pluginConfiguration). Every error names the plugin and the file.
func readAdmissionPaths(admissionFile string, ac *admissionConfiguration) (map[string][]byte, error) {
	var out map[string][]byte
	for i, p := range ac.Plugins {
		if p.Path == "" {
			continue
		}
		file := resolveAdmissionPath(admissionFile, p.Path)
		b, _, err := durable.ReadRegular(file)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d] (%s): path %q: %w", i, p.Name, p.Path, err)
		}
		if _, err := pluginConfiguration(b); err != nil {
			return nil, fmt.Errorf("plugins[%d] (%s): path %q (%s): %w", i, p.Name, p.Path, file, err)
		}
		if out == nil {
			out = map[string][]byte{}
		}
		out[p.Path] = b
	}
	return out, nil
}

// pluginConfiguration is the contents of a plugin's path: file as the JSON
// of an inline configuration. The apiserver hands such a file to the plugin,
// which decodes it, YAML or JSON, as a typed object (an EventRateLimit
// Configuration, a PodSecurityConfiguration, ...): so it must be one YAML or
// JSON object, without duplicate keys, with an apiVersion and a kind.
func pluginConfiguration(b []byte) (json.RawMessage, error) {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	j = bytes.TrimSpace(j)
	if len(j) == 0 || string(j) == "null" {
		return nil, errEmpty
	}
	if j[0] != '{' {
		return nil, fmt.Errorf("not an object: a plugin configuration is a typed object with an apiVersion and a kind")
	}
	var tm struct {
		APIVersion any `json:"apiVersion"`
		Kind       any `json:"kind"`
	}
	if err := json.Unmarshal(j, &tm); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	if s, ok := tm.APIVersion.(string); !ok || s == "" {
		return nil, fmt.Errorf("needs an apiVersion and kind: the plugin decodes it as a typed object")
	}
	if s, ok := tm.Kind.(string); !ok || s == "" {
		return nil, fmt.Errorf("needs an apiVersion and kind: the plugin decodes it as a typed object")
	}
	return json.RawMessage(j), nil
}

// inlineAdmissionPaths replaces every path: plugin of file by one whose
// configuration is the contents of that path in paths. The merged file
// lives in configDir, not beside the admission file, so a relative path
// left in it would name another file; inline, the contents are part of the
// merged file and of its hash. A path paths lacks is an error: the Profile
// was not read by LoadProfile.
func inlineAdmissionPaths(file *admissionConfiguration, paths map[string][]byte) error {
	for i, p := range file.Plugins {
		if p.Path == "" {
			continue
		}
		b, ok := paths[p.Path]
		if !ok {
			return fmt.Errorf("plugins[%d] (%s): the contents of path %q were not read; read them with LoadProfile", i, p.Name, p.Path)
		}
		cfg, err := pluginConfiguration(b)
		if err != nil {
			return fmt.Errorf("plugins[%d] (%s): path %q: %w", i, p.Name, p.Path, err)
		}
		file.Plugins[i] = admissionPlugin{Name: p.Name, Configuration: cfg}
	}
	return nil
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

// renderAdmission is the merged admission configuration's bytes, every
// path: plugin inlined from prof.AdmissionPaths. yaml encoding sorts every
// map key, so equal inputs give equal bytes.
func renderAdmission(prof Profile) ([]byte, error) {
	file, err := parseAdmission(prof.AdmissionConfig)
	if err != nil {
		return nil, err
	}
	if err := inlineAdmissionPaths(file, prof.AdmissionPaths); err != nil {
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
// plugin name. A plugin the admission file configures by path: is inlined:
// its configuration is the contents of that file as LoadProfile read it
// (Profile.AdmissionPaths), so the merged file names no other file. A
// malformed admission file, or a path: whose contents prof lacks, is an
// error naming the file.
func DerivedFiles(st *nodestate.NodeState, prof Profile) ([]DerivedFile, error) {
	if st.Profile.Name != nodestate.ProfileCIS {
		return nil, nil
	}
	if err := prof.requireCIS(); err != nil {
		return nil, fmt.Errorf("derived files: %w", err)
	}
	b, err := renderAdmission(prof)
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
