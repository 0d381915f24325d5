package nodestate

// Validation of a node state: every field checked, every failure a
// FieldError naming the field.

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// FieldError is a validation failure of one field.
type FieldError struct {
	Field  string // JSON path, e.g. "etcd.initialClusterState"
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// ValidationError lists every invalid field of a node state.
type ValidationError []*FieldError

func (v ValidationError) Error() string {
	parts := make([]string, len(v))
	for i, e := range v {
		parts[i] = e.Error()
	}
	return "invalid node state: " + strings.Join(parts, "; ")
}

// Fields is the field errors alone, without "invalid node state: ": for
// a document whose fields are not a node state's (a release applied to one).
func (v ValidationError) Fields() error {
	parts := make([]string, len(v))
	for i, e := range v {
		parts[i] = e.Error()
	}
	return errors.New(strings.Join(parts, "; "))
}

var (
	dnsLabel  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	imageRef  = regexp.MustCompile(`^[a-z0-9]+([._/:-][a-zA-Z0-9]+)*(:[\w][\w.-]{0,127})?(@sha256:[a-f0-9]{64})?$`)
	flagName  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	ifaceName = regexp.MustCompile(`^[a-zA-Z0-9_.:-]{1,15}$`)
)

// ParseKubernetesVersion parses a Kubernetes version as node state and
// release files write it: "v" and a semantic version (semver.org, parsed by
// k8s.io/apimachinery/pkg/util/version), e.g. v1.34.4, v1.35.0-rc.1 or
// v1.34.4+build.1. Unlike ParseSemantic alone it refuses a version without
// the "v" and any surrounding white space.
func ParseKubernetesVersion(s string) (*version.Version, error) {
	if !strings.HasPrefix(s, "v") || strings.TrimSpace(s) != s {
		return nil, fmt.Errorf("kubernetes version %q: must be v and a semantic version, like v1.34.4", s)
	}
	return version.ParseSemantic(s)
}

// Bad reports one invalid field to a validation.
type Bad func(field, format string, a ...any)

// Rule is a check a validation runs beside the node state's own, given
// the roster: what needs knowledge this package does not have (image tags,
// kubeadm's table) comes in as one (resolve.Validate).
type Rule func(st *NodeState, roster []string, bad Bad)

// Validate checks every field as the document says it and returns a
// ValidationError naming each invalid one, or nil. What the images' tags
// and kubeadm's table say is checked by resolve.Validate.
func (st *NodeState) Validate() error { return st.ValidateWith(nil) }

// ValidateWith is Validate with rule run too (after the versions field's
// own checks), its failures in the same ValidationError.
func (st *NodeState) ValidateWith(rule Rule) error {
	var errs ValidationError
	bad := func(field, format string, a ...any) {
		errs = append(errs, &FieldError{Field: field, Detail: fmt.Sprintf(format, a...)})
	}
	if st.APIVersion != APIVersion {
		bad("apiVersion", "must be %q, got %q", APIVersion, st.APIVersion)
	}
	if st.Kind != Kind {
		bad("kind", "must be %q, got %q", Kind, st.Kind)
	}
	if !dnsLabel.MatchString(st.NodeName) {
		bad("nodeName", "must be a lowercase DNS name, got %q", st.NodeName)
	}
	if net.ParseIP(st.AdvertiseAddress) == nil {
		bad("advertiseAddress", "must be an IP address, got %q", st.AdvertiseAddress)
	}
	if _, err := ParseKubernetesVersion(st.KubernetesVersion); err != nil {
		bad("kubernetesVersion", "must look like v1.34.4, got %q", st.KubernetesVersion)
	}
	roster := st.Roster()
	st.validateImages(roster, bad)
	for _, c := range slices.Sorted(maps.Keys(st.Images)) {
		if !slices.Contains(roster, c) {
			if slices.Contains(Components, c) {
				bad("images."+c, "set, but this node does not run %s (kube-vip needs vip)", c)
			} else {
				bad("images."+c, "unknown component %q (known: %s)", c, strings.Join(Components, ", "))
			}
		}
	}
	st.validateVersions(roster, bad)
	if rule != nil {
		rule(st, roster, bad)
	}
	for i, c := range st.Stopped {
		switch {
		case !slices.Contains(roster, c):
			bad(fmt.Sprintf("stopped[%d]", i), "%q is not a component of this node (its roster: %s)", c, strings.Join(roster, ", "))
		case slices.Contains(st.Stopped[:i], c):
			bad(fmt.Sprintf("stopped[%d]", i), "%s is listed twice", c)
		}
	}
	if !dnsLabel.MatchString(st.Etcd.MemberName) {
		bad("etcd.memberName", "must be a lowercase DNS name, got %q", st.Etcd.MemberName)
	}
	if err := validateInitialCluster(st.Etcd.InitialCluster, st.Etcd.MemberName); err != nil {
		bad("etcd.initialCluster", "%v", err)
	}
	if s := st.Etcd.InitialClusterState; s != "new" && s != "existing" {
		bad("etcd.initialClusterState", `must be "new" or "existing", got %q`, s)
	}
	absPath := func(field, p string) {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			bad(field, "must be a clean absolute path, got %q", p)
		}
	}
	absPath("etcd.dataDir", st.Etcd.DataDir)
	if g := st.Etcd.TerminationGracePeriodSeconds; g != nil && (*g < 1 || *g > 300) {
		// 0 would ask kubelet for no SIGTERM at all; etcd's shutdown is
		// owed its signal. Past 300 s a stop waits longer than any deadline.
		bad("etcd.terminationGracePeriodSeconds", "must be between 1 and 300 seconds, got %d", *g)
	}
	absPath("pkiDir", st.PKIDir)
	absPath("kubeconfigDir", st.KubeconfigDir)
	absPath("configDir", st.ConfigDir)
	if st.VIP != nil {
		if ip := net.ParseIP(st.VIP.Address); ip == nil {
			bad("vip.address", "must be an IP address, got %q", st.VIP.Address)
		} else if st.VIP.Address == st.AdvertiseAddress {
			bad("vip.address", "must differ from advertiseAddress %s", st.AdvertiseAddress)
		}
		if !ifaceName.MatchString(st.VIP.Interface) {
			bad("vip.interface", "must be a network interface name, got %q", st.VIP.Interface)
		}
	}
	switch st.Profile.Name {
	case ProfileDefault:
		if st.Profile.AuditPolicyFile != "" {
			bad("profile.auditPolicyFile", "only the cis profile takes an audit policy")
		}
		if st.Profile.AdmissionConfigFile != "" {
			bad("profile.admissionConfigFile", "only the cis profile takes an admission configuration")
		}
	case ProfileCIS:
		if st.Profile.AuditPolicyFile == "" {
			bad("profile.auditPolicyFile", "required by the cis profile")
		} else {
			absPath("profile.auditPolicyFile", st.Profile.AuditPolicyFile)
		}
		if st.Profile.AdmissionConfigFile == "" {
			bad("profile.admissionConfigFile", "required by the cis profile")
		} else {
			absPath("profile.admissionConfigFile", st.Profile.AdmissionConfigFile)
		}
		absPath("profile.auditLogDir", st.Profile.AuditLogDir)
	default:
		bad("profile.name", `must be "default" or "cis", got %q`, st.Profile.Name)
	}
	if err := validCIDRs(st.Networking.ServiceCIDR); err != nil {
		bad("networking.serviceCIDR", "must be a CIDR or a dual-stack pair, got %q: %v", st.Networking.ServiceCIDR, err)
	}
	if !dnsLabel.MatchString(st.Networking.DNSDomain) {
		bad("networking.dnsDomain", "must be a lowercase DNS name, got %q", st.Networking.DNSDomain)
	}
	if err := validCIDRs(st.Networking.PodCIDR); err != nil && st.Networking.PodCIDR != NoPodCIDR {
		bad("networking.podCIDR", "must be a CIDR, a dual-stack pair or %q, got %q: %v", NoPodCIDR, st.Networking.PodCIDR, err)
	}
	ports := []struct {
		f string
		p int
	}{
		{"ports.etcdClient", st.Ports.EtcdClient}, {"ports.etcdPeer", st.Ports.EtcdPeer},
		{"ports.etcdMetrics", st.Ports.EtcdMetrics}, {"ports.apiServer", st.Ports.APIServer},
		{"ports.controllerManager", st.Ports.ControllerManager}, {"ports.scheduler", st.Ports.Scheduler},
	}
	seen := map[int]string{}
	for _, p := range ports {
		if p.p < 1 || p.p > 65535 {
			bad(p.f, "must be a port number, got %d", p.p)
		} else if other, dup := seen[p.p]; dup {
			bad(p.f, "port %d is already used by %s", p.p, other)
		}
		seen[p.p] = p.f
	}
	st.validateExtraArgs(roster, bad)
	st.validatePodFields(roster, bad)
	for i, d := range st.CACertDirs {
		switch {
		case !filepath.IsAbs(d) || filepath.Clean(d) != d:
			bad(fmt.Sprintf("caCertDirs[%d]", i), "must be an absolute, clean path, got %q", d)
		case d == "/etc/ssl/certs":
			bad(fmt.Sprintf("caCertDirs[%d]", i), "/etc/ssl/certs is always mounted (as ca-certs); leave it out")
		case slices.Contains(st.CACertDirs[:i], d):
			bad(fmt.Sprintf("caCertDirs[%d]", i), "%s is listed twice", d)
		case slices.Contains(reservedVolumes, strings.ReplaceAll(d, "/", "-")[1:]):
			bad(fmt.Sprintf("caCertDirs[%d]", i), "%s would be mounted as volume %q, a name the render uses for another mount", d, strings.ReplaceAll(d, "/", "-")[1:])
		}
	}
	for _, c := range slices.Sorted(maps.Keys(st.AdoptedInputs)) {
		switch {
		case !slices.Contains(roster, c) && !st.IsStopped(c):
			bad("adoptedInputs."+c, "not a component this node runs")
		case !sha256Hex.MatchString(st.AdoptedInputs[c]):
			bad("adoptedInputs."+c, "must be a sha256 digest in hex (64 characters 0-9a-f), as init --from-kubeadm records it")
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// reservedVolumes are the volume names the render gives its other mounts
// of kube-apiserver and kube-controller-manager; a CA directory's volume
// (its path with dashes) must not take one.
var reservedVolumes = []string{"ca-certs", "k8s-certs", "kubeconfig", "flexvolume-dir", "audit-policy", "audit-log", "stratum-config"}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// OwnedEtcdFlag reports whether etcd's --name flag is rendered from a node
// state field that extraArgs may not override.
func OwnedEtcdFlag(name string) bool {
	_, ok := ownedEtcdFlags[name]
	return ok
}

// ownedEtcdFlags are etcd flags rendered from dedicated node state fields
// that the etcd data backup and restore rely on: an extra arg moving one of
// them would have a rollback restore the wrong directory or dial the wrong
// port.
var ownedEtcdFlags = map[string]string{
	"data-dir":                    "etcd.dataDir",
	"name":                        "etcd.memberName",
	"initial-cluster":             "etcd.initialCluster",
	"initial-cluster-state":       "etcd.initialClusterState",
	"initial-cluster-token":       "etcd.initialCluster",
	"listen-client-urls":          "ports.etcdClient",
	"advertise-client-urls":       "ports.etcdClient",
	"initial-advertise-peer-urls": "ports.etcdPeer",
	"listen-peer-urls":            "ports.etcdPeer",
	"trusted-ca-file":             "pkiDir",
	"cert-file":                   "pkiDir",
	"key-file":                    "pkiDir",
}

func validateInitialCluster(s, member string) error {
	if s == "" {
		return errors.New("required")
	}
	found := false
	for _, part := range strings.Split(s, ",") {
		name, url, ok := strings.Cut(part, "=")
		if !ok || name == "" || !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://") {
			return fmt.Errorf("entry %q is not name=peerURL", part)
		}
		if name == member {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("does not list this member %q", member)
	}
	return nil
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
