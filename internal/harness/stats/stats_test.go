package stats

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10}, {0.01, 1}, {0, 1}} {
		if got := Quantile(ds, tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if ds[0] != 5 {
		t.Error("Quantile sorted its input")
	}
	if got := Quantile([]time.Duration{7}, 0.9); got != 7 {
		t.Errorf("p90 of one value = %v, want it", got)
	}
	if Quantile(nil, 0.5) != 0 {
		t.Error("Quantile of nothing is not 0")
	}
}
