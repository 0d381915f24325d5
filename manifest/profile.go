package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Profile holds the contents of a node profile's files and the digests of
// the components' start-only input files, as read by LoadProfile. It is the
// only input of Render besides the node state that comes from disk, so
// Render itself never reads a file: the same state and the same Profile
// always render the same bytes.
//
// Inputs is what LoadInputs found for every start-only input file of the
// roster; Render hashes it into InputsAnnotation, and a path Inputs lacks
// hashes as absent.
//
// For the default profile the other fields are nil. For the cis profile
// AuditPolicy is the audit policy file the apiserver's --audit-policy-file
// names, and AdmissionConfig is the AdmissionConfiguration file that
// DerivedFiles merges over the profile's built-in plugin configuration.
//
// AdmissionPaths holds the contents of the files the admission file's
// plugins name with path:, keyed by the path as written there: LoadProfile
// reads each one, a relative path joined to the admission file's directory
// as the apiserver would, and DerivedFiles inlines them.
type Profile struct {
	AuditPolicy     []byte
	AdmissionConfig []byte
	AdmissionPaths  map[string][]byte
	Inputs          Inputs
}

// LoadProfile reads the files st.Profile names, the files the admission
// file's plugins name with path:, and (LoadInputs) the start-only input
// files of every component. It does not follow a symlink at a file's last
// element (durable.ReadRegular). A default profile reads only the input
// files.
//
// Both cis files are checked before they are returned: the audit policy
// must be an audit.k8s.io/v1 Policy and the admission file a well-formed
// AdmissionConfiguration (see DerivedFiles), because the apiserver reads
// them only when it starts and a bad one would leave it crash-looping.
// Every error names the node state field and the file.
func LoadProfile(st *nodestate.NodeState) (Profile, error) {
	in, err := LoadInputs(st)
	if err != nil {
		return Profile{}, err
	}
	p, err := loadProfileFiles(st)
	if err != nil {
		return Profile{}, err
	}
	p.Inputs = in
	return p, nil
}

// loadProfileFiles is LoadProfile but for the input files.
func loadProfileFiles(st *nodestate.NodeState) (Profile, error) {
	switch st.Profile.Name {
	case nodestate.ProfileDefault, "":
		return Profile{}, nil
	case nodestate.ProfileCIS:
	default:
		return Profile{}, fmt.Errorf("profile.name: unknown profile %q (known: %s, %s)", st.Profile.Name, nodestate.ProfileDefault, nodestate.ProfileCIS)
	}
	var p Profile
	var err error
	if p.AuditPolicy, err = readProfileFile("profile.auditPolicyFile", st.Profile.AuditPolicyFile); err != nil {
		return Profile{}, err
	}
	if err := checkAuditPolicy(p.AuditPolicy); err != nil {
		return Profile{}, fmt.Errorf("profile.auditPolicyFile %s: %w", st.Profile.AuditPolicyFile, err)
	}
	if p.AdmissionConfig, err = readProfileFile("profile.admissionConfigFile", st.Profile.AdmissionConfigFile); err != nil {
		return Profile{}, err
	}
	ac, err := parseAdmission(p.AdmissionConfig)
	if err != nil {
		return Profile{}, fmt.Errorf("profile.admissionConfigFile %s: %w", st.Profile.AdmissionConfigFile, err)
	}
	if p.AdmissionPaths, err = readAdmissionPaths(st.Profile.AdmissionConfigFile, ac); err != nil {
		return Profile{}, fmt.Errorf("profile.admissionConfigFile %s: %w", st.Profile.AdmissionConfigFile, err)
	}
	return p, nil
}

func readProfileFile(field, path string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("%s: required by the %s profile", field, nodestate.ProfileCIS)
	}
	b, _, err := durable.ReadRegular(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", field, path, err)
	}
	return b, nil
}

// checkAuditPolicy reports whether b looks like an audit policy the
// apiserver accepts: YAML of kind Policy, apiVersion audit.k8s.io/v1. The
// rules themselves are the apiserver's to judge.
func checkAuditPolicy(b []byte) error {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &tm); err != nil {
		return fmt.Errorf("not YAML: %w", err)
	}
	if tm.APIVersion != "audit.k8s.io/v1" || tm.Kind != "Policy" {
		return fmt.Errorf("must be an audit.k8s.io/v1 Policy, got apiVersion %q kind %q", tm.APIVersion, tm.Kind)
	}
	return nil
}

// requireCIS checks that prof carries what the cis profile renders from.
func (p Profile) requireCIS() error {
	var missing []string
	if len(p.AuditPolicy) == 0 {
		missing = append(missing, "audit policy (profile.auditPolicyFile)")
	}
	if len(p.AdmissionConfig) == 0 {
		missing = append(missing, "admission configuration (profile.admissionConfigFile)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the cis profile needs its files' contents, missing: %v; read them with LoadProfile", missing)
	}
	return nil
}

// auditPolicyHash is AuditPolicyAnnotation's value: the sha256 of the
// profile's plain config files in order. For the cis profile that is its
// audit policy alone.
func (p Profile) auditPolicyHash() string {
	h := sha256.New()
	h.Write(p.AuditPolicy)
	return hex.EncodeToString(h.Sum(nil))
}

// admissionHash is AdmissionConfigAnnotation's value: the sha256 of the
// profile's AdmissionConfiguration file as read, each file its plugins name
// with path: (by path, each framed by its path and length), and the merged
// file DerivedFiles renders from them and the built-ins (framed by its
// length). So it moves with any byte of an input file, and with the merged
// file when only the built-ins change: the derived file is written only
// with the apiserver's manifest, so a change the hash missed would never
// reach the apiserver. Render checks renderAdmission before it renders the
// apiserver, so the "" of an unrenderable Profile is never an annotation.
func (p Profile) admissionHash() string {
	merged, err := renderAdmission(p)
	if err != nil {
		return ""
	}
	h := sha256.New()
	h.Write(p.AdmissionConfig)
	for _, path := range slices.Sorted(maps.Keys(p.AdmissionPaths)) {
		b := p.AdmissionPaths[path]
		fmt.Fprintf(h, "\x00path %q %d\x00", path, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "\x00merged %d\x00", len(merged))
	h.Write(merged)
	return hex.EncodeToString(h.Sum(nil))
}

var errEmpty = errors.New("empty file")
