package versions

// This file holds the rules of the compatibility-version flags (KEP-4330)
// of kube-apiserver, kube-controller-manager and kube-scheduler:
// --emulated-version and --min-compatibility-version, which let a binary of
// minor N keep the APIs, features and storage versions of an older minor.
// The rules are the binaries' own (k8s.io/component-base/compatibility and
// featuregate, k8s.io/apiserver/pkg/util/compatibility), pinned against the
// real 1.36 and 1.37 binaries by TestRealEmulationRules.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// The names of the emulation checks, as --ignore-preflight-errors takes
// them.
const (
	// CheckEmulatedVersionRange: a compatibility-version flag the binary
	// refuses to start with: a malformed or patch version, a component
	// other than kube, an emulated version outside [N-3, N] for binary
	// minor N, a min compatibility version outside [N-3, emulated], or an
	// *-emulation-forward-compatible flag without emulation.
	CheckEmulatedVersionRange = "EmulatedVersionRange"
	// CheckEmulationFeatureGates: --feature-gates names a gate that does
	// not exist yet at the emulated version (pre-alpha there): the binary
	// refuses to start.
	CheckEmulationFeatureGates = "EmulationFeatureGates"
	// CheckEmulationAlphaGates: an alpha feature is enabled while the
	// binary emulates an older version. The binary starts and logs that
	// this is unsupported; KEP-4330 does not let alpha features be used
	// with emulation (they are not designed to be upgraded or rolled back).
	CheckEmulationAlphaGates = "EmulationAlphaGates"
	// CheckEmulationKubeletSkew: the node's kubelet is newer than the
	// version kube-apiserver emulates. KEP-4330 applies the version skew
	// policy to the emulated version, and the policy does not let kubelet
	// be newer than kube-apiserver.
	CheckEmulationKubeletSkew = "EmulationKubeletSkew"
	// CheckEmulationComponentSkew: kube-controller-manager or
	// kube-scheduler would be newer than kube-apiserver, or more than one
	// minor older, by the versions they emulate (a binary without
	// --emulated-version counts at its own minor): KEP-4330 applies the
	// version skew policy to the emulated versions.
	CheckEmulationComponentSkew = "EmulationComponentSkew"
)

// EmulationChecks are the emulation checks, in the order their findings
// are reported.
var EmulationChecks = []string{CheckEmulatedVersionRange, CheckEmulationFeatureGates, CheckEmulationAlphaGates, CheckEmulationComponentSkew, CheckEmulationKubeletSkew, CheckEmulationFinished}

// EmulationRule is what a Kubernetes component's binary of one minor
// accepts of the compatibility-version flags.
type EmulationRule struct {
	// Emulated: the binary has --emulated-version (from 1.31); MinCompat:
	// --min-compatibility-version (from 1.35, kubernetes/kubernetes#133980).
	// Each minor's flag table agrees.
	Emulated, MinCompat bool
	// Floor is the lowest emulated version and the lowest min
	// compatibility version: binary minor - 3, never below 1.31, the
	// first with emulation (kubeEffectiveVersionFloors in
	// k8s.io/apiserver/pkg/util/compatibility, the same from 1.34 to 1.37:
	// KEP-4330 is beta, N-3; its alpha allowed N-1).
	Floor string
}

// emulationRules is the rule of each supported binary minor, the same for
// kube-apiserver, kube-controller-manager and kube-scheduler (each
// registers the kube component's effective version with the same floor).
var emulationRules = map[string]EmulationRule{
	"1.34": {Emulated: true, Floor: "1.31"},
	"1.35": {Emulated: true, MinCompat: true, Floor: "1.32"},
	"1.36": {Emulated: true, MinCompat: true, Floor: "1.33"},
	"1.37": {Emulated: true, MinCompat: true, Floor: "1.34"},
}

// Emulation is the rule of component's binary at v; false for a component
// without compatibility versions (etcd, kube-vip) or a minor not in the
// table.
func Emulation(component string, v *version.Version) (EmulationRule, bool) {
	if !slices.Contains(kubernetesComponents, component) {
		return EmulationRule{}, false
	}
	r, ok := emulationRules[MinorOf(v)]
	return r, ok
}

// The compatibility-version flags, as extraArgs name them.
const (
	FlagEmulatedVersion         = "emulated-version"
	FlagMinCompatibilityVersion = "min-compatibility-version"
)

// forwardCompatibleFlags are the kube-apiserver flags it refuses as true
// unless it emulates an older version (ServerRunOptions.Validate).
var forwardCompatibleFlags = map[string]string{
	"emulation-forward-compatible":                "EmulationForwardCompatible",
	"runtime-config-emulation-forward-compatible": "RuntimeConfigEmulationForwardCompatible",
}

// EmulatedVersion is the version a component emulates by args (its final
// flag set): nil when it sets no --emulated-version or one that does not
// parse (CheckEmulation says why). The range is not checked here.
func EmulatedVersion(args map[string]nodestate.ArgValues) *version.Version {
	m, err := versionFlag(args[FlagEmulatedVersion])
	if err != nil {
		return nil
	}
	return m
}

// CheckEmulation checks the compatibility-version flags of component's
// final flag set args against its binary at binary, as the binary does
// when it starts, and returns every failed check: EmulatedVersionRange and
// EmulationFeatureGates (the binary would refuse to start: Unsupported),
// then EmulationAlphaGates. Nil when args set neither flag and no
// forward-compatible flag, or for a component without them.
func CheckEmulation(component string, binary *version.Version, args map[string]nodestate.ArgValues) []Finding {
	rule, ok := Emulation(component, binary)
	if !ok {
		return nil
	}
	var out []Finding
	refuse := func(check, format string, a ...any) {
		out = append(out, Finding{Check: check, Component: component, Unsupported: true,
			Message: fmt.Sprintf("%s %s would refuse to start: ", component, kv(binary)) + fmt.Sprintf(format, a...)})
	}
	bin := version.MajorMinor(binary.Major(), binary.Minor())
	emulated := bin
	_, setEmu := args[FlagEmulatedVersion]
	_, setMin := args[FlagMinCompatibilityVersion]
	if setEmu && !rule.Emulated {
		refuse(CheckEmulatedVersionRange, "it has no --%s", FlagEmulatedVersion)
		return out
	}
	if setMin && !rule.MinCompat {
		refuse(CheckEmulatedVersionRange, "it has no --%s (Kubernetes 1.35 added it)", FlagMinCompatibilityVersion)
		return out
	}
	floor := version.MustParseGeneric(rule.Floor)
	if setEmu {
		v, err := versionFlag(args[FlagEmulatedVersion])
		switch {
		case err != nil:
			refuse(CheckEmulatedVersionRange, "--%s: %v; write it kube=MAJOR.MINOR, as --%s=kube=%s", FlagEmulatedVersion, err, FlagEmulatedVersion, prevMinor(bin))
			return out
		case v != nil && (v.GreaterThan(bin) || v.LessThan(floor)):
			refuse(CheckEmulatedVersionRange, "--%s=kube=%s is outside what a %s binary emulates, %s to %s (three minors back at most)", FlagEmulatedVersion, MinorOf(v), MinorOf(bin), rule.Floor, MinorOf(bin))
			return out
		case v != nil:
			emulated = v
		}
	}
	// The default min compatibility version is the emulated one - 1, not
	// below the floor (effectiveVersion.SetEmulationVersion).
	minCompat := version.MajorMinor(emulated.Major(), emulated.Minor()-1)
	if minCompat.LessThan(floor) {
		minCompat = floor
	}
	if setMin {
		v, err := versionFlag(args[FlagMinCompatibilityVersion])
		switch {
		case err != nil:
			refuse(CheckEmulatedVersionRange, "--%s: %v; write it kube=MAJOR.MINOR", FlagMinCompatibilityVersion, err)
			return out
		case v != nil && (v.GreaterThan(emulated) || v.LessThan(floor)):
			refuse(CheckEmulatedVersionRange, "--%s=kube=%s must be from %s to the emulated version %s", FlagMinCompatibilityVersion, MinorOf(v), rule.Floor, MinorOf(emulated))
			return out
		case v != nil:
			minCompat = v
		}
	}
	if !emulated.LessThan(bin) {
		for _, name := range slices.Sorted(maps.Keys(forwardCompatibleFlags)) {
			if on, _ := strconv.ParseBool(args[name].Last()); on {
				refuse(CheckEmulatedVersionRange, "--%s=true (%s cannot be set to true if the emulation version is the same as the binary version): it needs --%s below %s", name, forwardCompatibleFlags[name], FlagEmulatedVersion, MinorOf(bin))
			}
		}
		return out
	}
	return append(out, checkGates(component, binary, emulated, minCompat, args["feature-gates"])...)
}

// versionFlag parses the values of --emulated-version or
// --min-compatibility-version as the binaries do (toVersionMap in
// component-base/compatibility): comma-separated component=MAJOR.MINOR
// pairs, a bare version meaning kube; only the kube component is
// registered in these binaries. Nil, nil when no value names one.
func versionFlag(values nodestate.ArgValues) (*version.Version, error) {
	var kube *version.Version
	for _, value := range values {
		for _, pair := range strings.Split(value, ",") {
			comp, v := "kube", pair
			if c, rest, ok := strings.Cut(pair, "="); ok {
				comp, v = strings.TrimSpace(c), strings.TrimSpace(rest)
			}
			if comp != "kube" {
				return nil, fmt.Errorf("component not registered: %s", comp)
			}
			ver, err := version.Parse(v)
			if err != nil {
				return nil, err
			}
			if ver.Patch() != 0 {
				return nil, fmt.Errorf("patch version not allowed, got: %s=%s", comp, ver)
			}
			if kube != nil {
				return nil, fmt.Errorf("duplicate version flag, kube=%s and kube=%s", kube, ver)
			}
			kube = version.MajorMinor(ver.Major(), ver.Minor())
		}
	}
	return kube, nil
}

// CheckEmulationKubelet is the EmulationKubeletSkew check of kube-apiserver
// at binary with its final flag set args, against the node's kubelet at
// kubelet ("v1.37.2"; "" when unknown, which refuses nothing): KEP-4330
// applies the version skew policy to the emulated version, so kubelet must
// not be newer than the minor kube-apiserver emulates. Nil when
// kube-apiserver emulates nothing or the versions allow it.
func CheckEmulationKubelet(binary *version.Version, args map[string]nodestate.ArgValues, kubelet string) []Finding {
	emulated := EmulatedVersion(args)
	kl, err := version.ParseGeneric(kubelet)
	if emulated == nil || err != nil {
		return nil
	}
	if kl.Major() == emulated.Major() && kl.Minor() <= emulated.Minor() {
		return nil
	}
	return []Finding{{Check: CheckEmulationKubeletSkew, Component: nodestate.KubeAPIServer, Message: fmt.Sprintf(
		"kubelet %s is newer than the version kube-apiserver %s emulates, %s: the version skew policy, which KEP-4330 applies to the emulated version, does not let kubelet be newer than kube-apiserver; keep --%s at kube=%s or later, or take the two-step upgrade's finishing step first",
		kv(kl), kv(binary), MinorOf(emulated), FlagEmulatedVersion, MinorOf(kl))}}
}

// CheckEmulationSkew is the EmulationComponentSkew check of a node's
// Kubernetes components, by component: binaries (their versions) and args
// (their final flag sets). Each counts at the version it emulates, or its
// binary's minor without one; kube-controller-manager and kube-scheduler
// must be at kube-apiserver's or one minor older. Nil when none emulates
// (ComponentSkew checks the binaries) or kube-apiserver is not known.
func CheckEmulationSkew(binaries map[string]*version.Version, args map[string]map[string]nodestate.ArgValues) []Finding {
	effective := map[string]*version.Version{}
	emulating := false
	for c, v := range binaries {
		if v == nil {
			continue
		}
		effective[c] = version.MajorMinor(v.Major(), v.Minor())
		if e := EmulatedVersion(args[c]); e != nil {
			effective[c], emulating = e, true
		}
	}
	api, ok := effective[nodestate.KubeAPIServer]
	if !emulating || !ok {
		return nil
	}
	at := func(c string) string {
		if e := EmulatedVersion(args[c]); e != nil {
			return fmt.Sprintf("emulating %s", MinorOf(e))
		}
		return fmt.Sprintf("at %s (no --%s)", MinorOf(effective[c]), FlagEmulatedVersion)
	}
	var out []Finding
	for _, c := range kubernetesComponents[1:] {
		v, ok := effective[c]
		if !ok {
			continue
		}
		var how string
		switch {
		case v.Major() != api.Major() || v.Minor() > api.Minor():
			how = "newer than"
		case v.Minor()+1 < api.Minor():
			how = "more than one minor older than"
		default:
			continue
		}
		out = append(out, Finding{Check: CheckEmulationComponentSkew, Component: c, Message: fmt.Sprintf(
			"%s %s %s would be %s kube-apiserver %s %s: KEP-4330 applies the version skew policy to the emulated versions, which allows %s at kube-apiserver's or one minor older; set --%s=kube=%s on %s too",
			c, kv(binaries[c]), at(c), how, kv(binaries[nodestate.KubeAPIServer]), at(nodestate.KubeAPIServer), c, FlagEmulatedVersion, MinorOf(api), c)})
	}
	return out
}
