package versions

// This file reads the embedded feature-gate tables and checks
// --feature-gates against an emulated version, as the binaries'
// featuregate package does when they start.

import (
	"embed"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// featureFS holds features/kube-<minor>.txt, the kube feature gates of the
// control-plane binaries of that minor with each gate's lifecycle, printed
// by the minor's flagdump -features (internal/harness/tools/kube1xx): one
// gate a line, "Gate<TAB>1.27=ALPHA 1.33=BETA,on 1.37=GA,on,locked", a
// stage holding from its version; ",min=1.37" only from that min
// compatibility version. Lines starting with # are comments.
//
//go:embed features
var featureFS embed.FS

// featureStage is one stage of a gate's lifecycle.
type featureStage struct {
	from      *version.Version
	stage     string // ALPHA, BETA, GA, DEPRECATED
	minCompat *version.Version
}

var (
	featuresOnce sync.Once
	featureTabs  map[string]map[string][]featureStage // minor -> gate -> stages, oldest first
)

// gatesOf is the feature-gate table of the binaries of v's minor, nil when
// none is embedded (then only AllAlpha is checked).
func gatesOf(v *version.Version) map[string][]featureStage {
	featuresOnce.Do(loadFeatures)
	return featureTabs[MinorOf(v)]
}

func loadFeatures() {
	featureTabs = map[string]map[string][]featureStage{}
	entries, _ := featureFS.ReadDir("features")
	for _, e := range entries {
		minor, ok := strings.CutSuffix(strings.TrimPrefix(e.Name(), "kube-"), ".txt")
		if !ok {
			continue
		}
		b, err := featureFS.ReadFile("features/" + e.Name())
		if err != nil {
			continue
		}
		tab := map[string][]featureStage{}
		for _, line := range strings.Split(string(b), "\n") {
			name, specs, ok := strings.Cut(strings.TrimSpace(line), "\t")
			if !ok || strings.HasPrefix(name, "#") {
				continue
			}
			for _, spec := range strings.Fields(specs) {
				if s, ok := parseStage(spec); ok {
					tab[name] = append(tab[name], s)
				}
			}
		}
		featureTabs[minor] = tab
	}
}

// parseStage reads "1.33=BETA,on,min=1.37".
func parseStage(spec string) (featureStage, bool) {
	from, rest, ok := strings.Cut(spec, "=")
	v, err := version.ParseGeneric(from)
	if !ok || err != nil {
		return featureStage{}, false
	}
	parts := strings.Split(rest, ",")
	s := featureStage{from: v, stage: parts[0]}
	for _, p := range parts[1:] {
		if m, ok := strings.CutPrefix(p, "min="); ok {
			s.minCompat, _ = version.ParseGeneric(m)
		}
	}
	return s, true
}

// stageAt is the gate's stage at the emulated version and min
// compatibility version, "" when it does not exist there yet (pre-alpha),
// as featureSpecAtEmulationAndMinCompatVersion picks it: the newest stage
// not after emulated whose min compatibility version minCompat reaches.
func stageAt(stages []featureStage, emulated, minCompat *version.Version) string {
	for i := len(stages) - 1; i >= 0; i-- {
		s := stages[i]
		if s.from.GreaterThan(emulated) || (s.minCompat != nil && minCompat.LessThan(s.minCompat)) {
			continue
		}
		if s.stage == "PRE-ALPHA" {
			return ""
		}
		return s.stage
	}
	return ""
}

// checkGates is CheckEmulation's look at --feature-gates of a binary
// emulating an older version: a gate not there yet at the emulated version
// is refused at start ("feature is PreAlpha at emulated version"); an
// alpha feature enabled there is only logged as unsupported
// (componentGlobalsRegistry.Validate), and KEP-4330 rules it out.
func checkGates(component string, binary, emulated, minCompat *version.Version, values nodestate.ArgValues) []Finding {
	tab := gatesOf(binary)
	var preAlpha, alpha []string
	for _, value := range values {
		for _, pair := range strings.Split(value, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok {
				continue
			}
			name = strings.TrimPrefix(strings.TrimSpace(name), "kube:")
			on, err := strconv.ParseBool(strings.TrimSpace(val))
			if err != nil {
				continue // the binary refuses it whatever it emulates
			}
			if name == "AllAlpha" {
				if on {
					alpha = append(alpha, "AllAlpha=true (every alpha feature)")
				}
				continue
			}
			stages, known := tab[name]
			if !known {
				continue // an unknown gate, or no table for this minor
			}
			switch stageAt(stages, emulated, minCompat) {
			case "":
				preAlpha = append(preAlpha, name)
			case "ALPHA":
				if on {
					alpha = append(alpha, name)
				}
			}
		}
	}
	var out []Finding
	at := fmt.Sprintf("%s %s emulating %s", component, kv(binary), MinorOf(emulated))
	if len(preAlpha) > 0 {
		slices.Sort(preAlpha)
		out = append(out, Finding{Check: CheckEmulationFeatureGates, Component: component, Unsupported: true, Message: fmt.Sprintf(
			"%s would refuse to start: --feature-gates sets %s, which Kubernetes %s does not have yet (\"feature is PreAlpha at emulated version\"); remove it from --feature-gates while the binary emulates %s",
			at, strings.Join(preAlpha, ", "), MinorOf(emulated), MinorOf(emulated))})
	}
	if len(alpha) > 0 {
		out = append(out, Finding{Check: CheckEmulationAlphaGates, Component: component, Message: fmt.Sprintf(
			"%s enables alpha feature gate(s) %s: Kubernetes does not support alpha features with an emulated version (KEP-4330; the binary logs \"alpha features enabled in emulated version, this is unsupported\"), and their data need not survive going back; disable them first, or upgrade without emulation",
			at, strings.Join(alpha, ", "))})
	}
	return out
}
