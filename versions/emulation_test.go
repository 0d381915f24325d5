package versions

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestEmulationRulesMatchFlagTables pins the emulation table against the
// flag tables of every supported minor (the binaries' whole flag sets):
// each component's binary has each flag exactly where the table says so,
// and the floor is three minors back, never below 1.31.
func TestEmulationRulesMatchFlagTables(t *testing.T) {
	for _, c := range kubernetesComponents {
		for _, minor := range KubernetesMinors {
			v := version.MustParseGeneric(minor + ".0")
			rule, ok := Emulation(c, v)
			if !ok {
				t.Errorf("%s %s: no emulation rule", c, minor)
				continue
			}
			flags := acceptedFlags(c, v)
			if rule.Emulated != flags[FlagEmulatedVersion] || rule.MinCompat != flags[FlagMinCompatibilityVersion] {
				t.Errorf("%s %s: rule says --%s %v, --%s %v; the flag table %v, %v", c, minor, FlagEmulatedVersion, rule.Emulated,
					FlagMinCompatibilityVersion, rule.MinCompat, flags[FlagEmulatedVersion], flags[FlagMinCompatibilityVersion])
			}
			want := max(int(v.Minor())-3, 31)
			if rule.Floor != fmt.Sprintf("1.%d", want) {
				t.Errorf("%s %s: floor %s, want 1.%d", c, minor, rule.Floor, want)
			}
		}
	}
	if _, ok := Emulation(nodestate.Etcd, version.MustParseGeneric("3.6.0")); ok {
		t.Error("etcd has an emulation rule")
	}
}

func args(kv ...string) map[string]nodestate.ArgValues {
	m := map[string]nodestate.ArgValues{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = append(m[kv[i]], kv[i+1])
	}
	return m
}

// checks is the findings' "Check" or "Check!" (Unsupported), in order.
func checks(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		s := f.Check
		if f.Unsupported {
			s += "!"
		}
		out = append(out, s)
	}
	return out
}

// TestCheckEmulation pins each rule of the compatibility-version flags on
// the 1.36 and 1.37 binaries (TestRealEmulationRules runs the same cases
// against the real binaries).
func TestCheckEmulation(t *testing.T) {
	for _, tc := range emulationCases {
		t.Run(tc.name, func(t *testing.T) {
			bin := version.MustParseGeneric(tc.binary)
			got := CheckEmulation(tc.component(), bin, args(tc.args...))
			if !slices.Equal(checks(got), tc.want) {
				t.Fatalf("findings %v, want %v: %v", checks(got), tc.want, got)
			}
			for _, f := range got {
				if f.Component != tc.component() || !strings.Contains(f.Message, tc.component()) {
					t.Errorf("finding %v: does not name %s", f, tc.component())
				}
			}
			// What the real binary does (TestRealEmulationRules) and the
			// findings agree: a refusal is a finding that cannot be
			// ignored, an alpha finding is one the binary warns of.
			if tc.binary == "1.36.3" || tc.binary == "1.37.2" {
				refused := slices.ContainsFunc(got, func(f Finding) bool { return f.Unsupported })
				if refused != (tc.refuse != "") {
					t.Errorf("refusal %v, but the binary's is %q", refused, tc.refuse)
				}
				if slices.Contains(checks(got), CheckEmulationAlphaGates) && tc.warn == "" {
					t.Errorf("%s, but the binary does not warn", CheckEmulationAlphaGates)
				}
			}
		})
	}
}

// emulationCase is one flag combination on one binary, with the findings
// CheckEmulation returns and, for the real-binary test, what the binary
// says (refuse: a fragment of its refusal; warn: of its warning; neither:
// it starts past flag validation).
type emulationCase struct {
	name   string
	comp   string // "" is kube-apiserver
	binary string
	args   []string
	want   []string
	refuse string
	warn   string
}

func (c emulationCase) component() string {
	if c.comp == "" {
		return nodestate.KubeAPIServer
	}
	return c.comp
}

var emulationCases = []emulationCase{
	{name: "no flags", binary: "1.37.2"},
	{name: "previous minor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36"}},
	{name: "bare version means kube", binary: "1.37.2", args: []string{"emulated-version", "1.36"}},
	{name: "v prefix", binary: "1.37.2", args: []string{"emulated-version", "v1.36"}},
	{name: "own minor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.37"}},
	{name: "floor is N-3", binary: "1.37.2", args: []string{"emulated-version", "kube=1.34"}},
	{name: "below floor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.33"}, want: []string{"EmulatedVersionRange!"}, refuse: "emulation version 1.33 is not between [1.34, 1.37.0]"},
	{name: "above binary", binary: "1.37.2", args: []string{"emulated-version", "kube=1.38"}, want: []string{"EmulatedVersionRange!"}, refuse: "emulation version 1.38 is not between [1.34, 1.37.0]"},
	{name: "1.36 floor", binary: "1.36.3", args: []string{"emulated-version", "kube=1.33"}},
	{name: "1.36 below floor", binary: "1.36.3", args: []string{"emulated-version", "kube=1.32"}, want: []string{"EmulatedVersionRange!"}, refuse: "emulation version 1.32 is not between [1.33, 1.36.0]"},
	{name: "1.36 above binary", binary: "1.36.3", args: []string{"emulated-version", "kube=1.37"}, want: []string{"EmulatedVersionRange!"}, refuse: "emulation version 1.37 is not between [1.33, 1.36.0]"},
	{name: "patch refused", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36.2"}, want: []string{"EmulatedVersionRange!"}, refuse: "patch version not allowed, got: kube=1.36.2"},
	{name: "other component", binary: "1.37.2", args: []string{"emulated-version", "wardle=1.36"}, want: []string{"EmulatedVersionRange!"}, refuse: "component not registered: wardle"},
	{name: "twice", binary: "1.37.2", args: []string{"emulated-version", "kube=1.35,kube=1.36"}, want: []string{"EmulatedVersionRange!"}, refuse: "duplicate version flag"},
	{name: "min compat at floor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "min-compatibility-version", "kube=1.34"}},
	{name: "min compat above emulated", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "min-compatibility-version", "kube=1.37"}, want: []string{"EmulatedVersionRange!"}, refuse: "minCompatibilityVersion version 1.37 is not between [1.34, 1.36]"},
	{name: "min compat below floor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "min-compatibility-version", "kube=1.33"}, want: []string{"EmulatedVersionRange!"}, refuse: "minCompatibilityVersion version 1.33 is not between [1.34, 1.36]"},
	{name: "min compat alone", binary: "1.37.2", args: []string{"min-compatibility-version", "kube=1.37"}},
	{name: "1.34 has no min compat", binary: "1.34.4", args: []string{"emulated-version", "kube=1.33", "min-compatibility-version", "kube=1.32"}, want: []string{"EmulatedVersionRange!"}},
	{name: "1.34 emulating 1.31", binary: "1.34.4", args: []string{"emulated-version", "kube=1.31"}},
	{name: "forward compatible without emulation", binary: "1.37.2", args: []string{"emulation-forward-compatible", "true"}, want: []string{"EmulatedVersionRange!"}, refuse: "EmulationForwardCompatible cannot be set to true if the emulation version is the same as the binary version"},
	{name: "runtime-config forward compatible without emulation", binary: "1.37.2", args: []string{"runtime-config-emulation-forward-compatible", "true"}, want: []string{"EmulatedVersionRange!"}, refuse: "RuntimeConfigEmulationForwardCompatible cannot be set to true"},
	{name: "forward compatible with emulation", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "emulation-forward-compatible", "true"}},
	{name: "all alpha emulating", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "AllAlpha=true"}, want: []string{"EmulationAlphaGates"}, warn: "alpha features enabled in emulated version, this is unsupported"},
	// AllAlpha alone is refused on 1.37: alpha gates depend on the beta
	// GenericWorkload. The binary warns even at its own minor: it compares
	// its version, 1.37.2, with the emulated 1.37.0 (any patch above .0).
	{name: "all alpha not emulating", binary: "1.37.2", args: []string{"emulated-version", "kube=1.37", "feature-gates", "AllAlpha=true,AllBeta=true"}, warn: alphaWarning},
	{name: "all alpha off", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "AllAlpha=false"}},
	{name: "gate not there yet", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "AtomicWriteVolumeUserFields=true"}, want: []string{"EmulationFeatureGates!"},
		refuse: "cannot set feature gate AtomicWriteVolumeUserFields to true, feature is PreAlpha at emulated version 1.36"},
	{name: "gate not there yet, off", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "AtomicWriteVolumeUserFields=false"}, want: []string{"EmulationFeatureGates!"},
		refuse: "cannot set feature gate AtomicWriteVolumeUserFields to false, feature is PreAlpha at emulated version 1.36"},
	{name: "gate of the binary's minor", binary: "1.37.2", args: []string{"feature-gates", "AtomicWriteVolumeUserFields=false"}},
	{name: "alpha at the emulated minor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "kube:DRAListTypeAttributes=true"}, want: []string{"EmulationAlphaGates"}, warn: alphaWarning},
	{name: "alpha at the emulated minor, off", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "DRAListTypeAttributes=false"}},
	{name: "beta now, alpha at the emulated minor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "NativeHistograms=true"}, want: []string{"EmulationAlphaGates"}, warn: alphaWarning},
	{name: "beta at the emulated minor", binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "ConstrainedImpersonation=true"}},
	{name: "alpha two minors back", binary: "1.37.2", args: []string{"emulated-version", "kube=1.35", "feature-gates", "ConstrainedImpersonation=true"}, want: []string{"EmulationAlphaGates"}, warn: alphaWarning},
	{name: "1.36 gate not there at 1.35", binary: "1.36.3", args: []string{"emulated-version", "kube=1.35", "feature-gates", "DRAListTypeAttributes=true"}, want: []string{"EmulationFeatureGates!"},
		refuse: "cannot set feature gate DRAListTypeAttributes to true, feature is PreAlpha at emulated version 1.35"},
	{name: "1.36 beta, alpha at 1.35", binary: "1.36.3", args: []string{"emulated-version", "kube=1.35", "feature-gates", "ConstrainedImpersonation=true"}, want: []string{"EmulationAlphaGates"}, warn: alphaWarning},
	{name: "1.36 alpha at 1.35, off", binary: "1.36.3", args: []string{"emulated-version", "kube=1.35", "feature-gates", "ConstrainedImpersonation=false"}},
	{name: "controller-manager gate not there yet", comp: nodestate.ControllerManager, binary: "1.36.3", args: []string{"emulated-version", "kube=1.35", "feature-gates", "CRIListStreaming=true"}, want: []string{"EmulationFeatureGates!"},
		refuse: "cannot set feature gate CRIListStreaming to true, feature is PreAlpha at emulated version 1.35"},
	{name: "controller-manager below floor", comp: nodestate.ControllerManager, binary: "1.37.2", args: []string{"emulated-version", "kube=1.33"}, want: []string{"EmulatedVersionRange!"}, refuse: "emulation version 1.33 is not between [1.34, 1.37.0]"},
	{name: "scheduler above binary", comp: nodestate.Scheduler, binary: "1.36.3", args: []string{"emulated-version", "kube=1.37"}, want: []string{"EmulatedVersionRange!"}, refuse: "emulation version 1.37 is not between [1.33, 1.36.0]"},
	{name: "scheduler all alpha", comp: nodestate.Scheduler, binary: "1.37.2", args: []string{"emulated-version", "kube=1.36", "feature-gates", "AllAlpha=true"}, want: []string{"EmulationAlphaGates"}, warn: "alpha features enabled in emulated version, this is unsupported"},
}

// TestCheckEmulationKubelet pins the kubelet skew rule: kubelet not newer
// than the version kube-apiserver emulates; unknown refuses nothing.
func TestCheckEmulationKubelet(t *testing.T) {
	bin := version.MustParseGeneric("1.37.2")
	for _, tc := range []struct {
		args    []string
		kubelet string
		want    bool
	}{
		{[]string{"emulated-version", "kube=1.36"}, "v1.37.2", true},
		{[]string{"emulated-version", "kube=1.36"}, "v1.36.3", false},
		{[]string{"emulated-version", "kube=1.36"}, "v1.34.4", false},
		{[]string{"emulated-version", "kube=1.35"}, "v1.36.3", true},
		{[]string{"emulated-version", "kube=1.36"}, "", false},
		{nil, "v1.37.2", false},
		{[]string{"emulated-version", "kube=1.33"}, "v1.37.2", true}, // CheckEmulation refuses it too
	} {
		got := CheckEmulationKubelet(bin, args(tc.args...), tc.kubelet)
		if (len(got) == 1 && got[0].Check == CheckEmulationKubeletSkew) != tc.want || len(got) > 1 {
			t.Errorf("%v, kubelet %q: %v, want a finding %v", tc.args, tc.kubelet, got, tc.want)
		}
	}
}

// TestCheckEmulationSkew pins the skew policy on emulated versions: the
// two-step binary step emulates the old minor on all three components; on
// kube-apiserver alone it leaves the others newer.
func TestCheckEmulationSkew(t *testing.T) {
	v137 := version.MustParseGeneric("1.37.2")
	all := map[string]*version.Version{nodestate.KubeAPIServer: v137, nodestate.ControllerManager: v137, nodestate.Scheduler: v137}
	emu := func(comps ...string) map[string]map[string]nodestate.ArgValues {
		m := map[string]map[string]nodestate.ArgValues{}
		for _, c := range comps {
			m[c] = args("emulated-version", "kube=1.36")
		}
		return m
	}
	for _, tc := range []struct {
		name string
		bins map[string]*version.Version
		args map[string]map[string]nodestate.ArgValues
		want []string // components with a finding
	}{
		{"none emulates", all, emu(), nil},
		{"all three emulate 1.36", all, emu(nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler), nil},
		{"kube-apiserver alone", all, emu(nodestate.KubeAPIServer), []string{nodestate.ControllerManager, nodestate.Scheduler}},
		{"scheduler left out", all, emu(nodestate.KubeAPIServer, nodestate.ControllerManager), []string{nodestate.Scheduler}},
		{"others emulate, kube-apiserver does not", all, emu(nodestate.ControllerManager, nodestate.Scheduler), nil},
		{"1.36 binaries beside kube-apiserver emulating 1.36", map[string]*version.Version{nodestate.KubeAPIServer: v137,
			nodestate.ControllerManager: version.MustParseGeneric("1.36.3"), nodestate.Scheduler: version.MustParseGeneric("1.36.3")}, emu(nodestate.KubeAPIServer), nil},
	} {
		got := CheckEmulationSkew(tc.bins, tc.args)
		var comps []string
		for _, f := range got {
			if f.Check != CheckEmulationComponentSkew || f.Unsupported {
				t.Errorf("%s: %v", tc.name, f)
			}
			comps = append(comps, f.Component)
		}
		slices.Sort(comps)
		if !slices.Equal(comps, tc.want) {
			t.Errorf("%s: findings for %v, want %v: %v", tc.name, comps, tc.want, got)
		}
	}
	far := emu(nodestate.KubeAPIServer)
	far[nodestate.KubeAPIServer] = args("emulated-version", "kube=1.37")
	far[nodestate.Scheduler] = args("emulated-version", "kube=1.35")
	got := CheckEmulationSkew(all, far)
	if len(got) != 1 || got[0].Component != nodestate.Scheduler || !strings.Contains(got[0].Message, "more than one minor older") {
		t.Errorf("scheduler emulating 1.35 beside kube-apiserver at 1.37: %v", got)
	}
}

// TestFeatureTables pins that each minor the test bed runs has its
// feature-gate table (without one only AllAlpha is checked), whole and of
// its version.
func TestFeatureTables(t *testing.T) {
	for _, minor := range []string{"1.36", "1.37"} {
		b, err := featureFS.ReadFile("features/kube-" + minor + ".txt")
		if err != nil {
			t.Errorf("%s: no table: %v", minor, err)
			continue
		}
		header, _, _ := strings.Cut(string(b), "\n")
		if !strings.Contains(header, "v"+minor+".") {
			t.Errorf("kube-%s.txt: header %q names another version", minor, header)
		}
		tab := gatesOf(version.MustParseGeneric(minor + ".0"))
		if len(tab) < 100 || stageAt(tab["AllAlpha"], version.MustParseGeneric(minor), nil) != "ALPHA" {
			t.Errorf("kube-%s.txt: %d gates, AllAlpha %v", minor, len(tab), tab["AllAlpha"])
		}
		for name, stages := range tab {
			for _, s := range stages {
				if !slices.Contains([]string{"ALPHA", "BETA", "GA", "DEPRECATED"}, s.stage) {
					t.Errorf("kube-%s.txt: %s has stage %q", minor, name, s.stage)
				}
			}
		}
	}
}
