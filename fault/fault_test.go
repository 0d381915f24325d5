package fault

import (
	"os"
	"slices"
	"testing"
)

func TestPointsUniqueAndOrdered(t *testing.T) {
	roster := []string{"etcd", "kube-apiserver"}
	up := UpgradePoints(roster)
	rb := RollbackPoints(roster)
	if got, want := len(up), 6+len(Steps)*len(roster); got != want {
		t.Errorf("%d upgrade points, want %d", got, want)
	}
	if got, want := len(rb), 5+len(Steps)*len(roster); got != want {
		t.Errorf("%d rollback points, want %d", got, want)
	}
	all := append(slices.Clone(up), rb...)
	seen := map[Point]bool{}
	for _, p := range all {
		if seen[p] {
			t.Errorf("point %s listed twice", p)
		}
		seen[p] = true
	}
	if up[3] != "before-write:etcd" || rb[4] != "rollback-before-write:etcd" {
		t.Errorf("step points: %s, %s", up[3], rb[4])
	}
	if up[4] != "after-stop:etcd" || rb[5] != "rollback-after-stop:etcd" {
		t.Errorf("the stop's points: %s, %s", up[4], rb[5])
	}
	for _, p := range Fixed() {
		if !seen[p] {
			t.Errorf("fixed point %s is in neither list", p)
		}
	}
}

// In a build without the stratumfault tag nothing arms a point: Hit returns
// whatever the environment holds.
func TestInertWithoutTag(t *testing.T) {
	if Enabled {
		t.Skip("built with stratumfault")
	}
	os.Setenv("STRATUM_"+"FAULT", "after-begin")
	defer os.Unsetenv("STRATUM_" + "FAULT")
	Hit(AfterBegin) // must return
}
