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
	if got, want := len(up), 7+len(Steps)*len(roster); got != want {
		t.Errorf("%d upgrade points, want %d", got, want)
	}
	if got, want := len(rb), 6+len(Steps)*len(roster); got != want {
		t.Errorf("%d rollback points, want %d", got, want)
	}
	if i := slices.Index(up, AfterEtcdAnswered); i < 1 || up[i-1] != AfterReplaced.Of("etcd") {
		t.Errorf("after-etcd-answered is not right after after-replaced:etcd: %v", up)
	}
	if slices.Contains(UpgradePoints([]string{"kube-apiserver"}), AfterEtcdAnswered) {
		t.Error("after-etcd-answered is a point of a roster without etcd")
	}
	all := append(slices.Clone(up), EtcdSilentPoints(roster)[0])
	all = append(all, EtcdSnapshotPoints()...)
	all = append(all, AfterEtcdDowngradeEnabling, AfterEtcdDowngradeEnabled, AfterEtcdDowngradeCancel)
	all = append(all, rb...)
	seen := map[Point]bool{}
	for _, p := range all {
		if seen[p] {
			t.Errorf("point %s listed twice", p)
		}
		seen[p] = true
	}
	if up[3] != "before-write:etcd" || rb[5] != "rollback-before-write:etcd" {
		t.Errorf("step points: %s, %s", up[3], rb[5])
	}
	if up[4] != "after-stop:etcd" || rb[6] != "rollback-after-stop:etcd" {
		t.Errorf("the stop's points: %s, %s", up[4], rb[6])
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
