// Package stats summarises measured durations for the benchmarks' reports
// (bench/, e2e's bench-kubelet).
package stats

import (
	"math"
	"slices"
	"time"
)

// Quantile is the nearest-rank q-quantile (0 < q <= 1) of ds: the
// smallest value at least a fraction q of ds is at or below; 0 for none.
// ds is not changed.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
