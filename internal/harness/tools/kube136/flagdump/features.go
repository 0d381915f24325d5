package main

// This file prints the feature gates the binaries register, with each
// gate's lifecycle, for versions/flags/features-<minor>.txt: what
// versions.CheckEmulation needs to tell which gates are alpha, or do not
// exist yet (pre-alpha), at an emulated version.

import (
	"fmt"
	"slices"
	"strings"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
)

// featureLines are the gates of the kube feature gate every control-plane
// binary parses --feature-gates into (all three link k8s.io/kubernetes/
// pkg/features, which registers them), sorted, one per line:
//
//	Gate<TAB>1.27=ALPHA 1.33=BETA 1.37=GA,locked
//
// Each version is the one from which the stage holds; ",on" marks a
// stage whose default is enabled, ",locked" one locked to its default,
// ",min=1.37" one that holds only from that --min-compatibility-version.
func featureLines() []string {
	var out []string
	for name, specs := range utilfeature.DefaultMutableFeatureGate.GetAllVersioned() {
		specs = slices.Clone(specs)
		slices.SortStableFunc(specs, func(a, b featuregate.FeatureSpec) int {
			switch {
			case a.Version.LessThan(b.Version):
				return -1
			case b.Version.LessThan(a.Version):
				return 1
			}
			return 0
		})
		var stages []string
		for _, s := range specs {
			stage := string(s.PreRelease)
			if s.PreRelease == featuregate.GA {
				stage = "GA" // featuregate spells it ""
			}
			st := fmt.Sprintf("%d.%d=%s", s.Version.Major(), s.Version.Minor(), stage)
			if s.Default {
				st += ",on"
			}
			if s.LockToDefault {
				st += ",locked"
			}
			if m := s.MinCompatibilityVersion; m != nil {
				st += fmt.Sprintf(",min=%d.%d", m.Major(), m.Minor())
			}
			stages = append(stages, st)
		}
		out = append(out, string(name)+"\t"+strings.Join(stages, " "))
	}
	slices.Sort(out)
	return out
}
