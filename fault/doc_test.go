package fault

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const archDoc = "../docs/architecture.md"

// docPoints is every point in the first column of the table under
// "### Fault points" in docs/architecture.md, in the order written.
func docPoints(t *testing.T) []Point {
	t.Helper()
	b, err := os.ReadFile(archDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n### Fault points\n")
	if !ok {
		t.Fatalf("%s has no section \"### Fault points\"", archDoc)
	}
	if i := strings.Index(sec, "\n#"); i >= 0 {
		sec = sec[:i]
	}
	var pts []Point
	tick := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for _, m := range tick.FindAllStringSubmatch(cells[0], -1) {
			pts = append(pts, Point(m[1]))
		}
	}
	if len(pts) == 0 {
		t.Fatalf("%s: no points in the table under \"### Fault points\"", archDoc)
	}
	return pts
}

// The fault-point table of docs/architecture.md lists every point package
// fault has (the per-component ones for a component C: before-write:C,
// rollback-before-write:C, ...), in the order a transaction reaches them,
// and no other.
func TestDocsFaultPoints(t *testing.T) {
	got := docPoints(t)
	// etcd's step has a point more than the others' (after-etcd-answered,
	// right after after-replaced): the table lists it after the generic
	// after-replaced:C, and the silent etcd's point before the rollback's;
	// the forced etcd snapshot's points come right after the etcd backup.
	var want []Point
	for _, p := range UpgradePoints([]string{"etcd"}) {
		switch p {
		case BeforeWrite.Of("etcd"):
			// A step that surges: its copy's points before the write.
			want = append(want, AfterSurgeWrite.Of("C"), AfterSurgeActive.Of("C"))
		case AfterStep.Of("etcd"):
			want = append(want, AfterSurgeRemoved.Of("C"))
		}
		want = append(want, Point(strings.TrimSuffix(string(p), ":etcd")+map[bool]string{true: ":C"}[strings.HasSuffix(string(p), ":etcd")]))
		if p == AfterEtcdBackup {
			// The forced etcd snapshot, before etcd's own step.
			want = append(want, EtcdSnapshotPoints()...)
			// etcd's downgrade enabled before etcd goes down a minor,
			// and its cancel when the transaction does not go on.
			want = append(want, AfterEtcdDowngradeEnabling, AfterEtcdDowngradeEnabled, AfterEtcdDowngradeCancel)
		}
	}
	want = append(want, EtcdSilentPoints([]string{"C"})...)
	// A rollback removes a surge copy cut short before it puts anything back.
	if i := slices.Index(want, AfterRollingBack); i >= 0 {
		want = slices.Insert(want, i+1, AfterSurgeRemoved.InRollback("C"))
	}

	// The sets first, so a missing or unknown point is named.
	known := map[Point]bool{}
	for _, p := range Fixed() {
		known[p] = true
	}
	for _, s := range Steps {
		known[s.Of("C")] = true
		known[s.InRollback("C")] = true
	}
	for _, s := range []Step{AfterSurgeWrite, AfterSurgeActive, AfterSurgeRemoved} {
		known[s.Of("C")] = true
	}
	known[AfterSurgeRemoved.InRollback("C")] = true
	for _, p := range want {
		if !known[p] {
			t.Fatalf("UpgradePoints/RollbackPoints has %s, which is neither in Fixed nor a Steps point", p)
		}
	}
	for p := range known {
		if !slices.Contains(want, p) {
			t.Errorf("%s is in Fixed or Steps but not in UpgradePoints/RollbackPoints", p)
		}
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("%s: point %s is missing from the table under \"### Fault points\"", archDoc, p)
		}
	}
	for _, p := range got {
		if !known[p] {
			t.Errorf("%s: the Fault points table lists %s, which package fault does not have", archDoc, p)
		}
	}
	if t.Failed() {
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: the Fault points table is not in the order a transaction reaches them:\n got %v\nwant %v", archDoc, got, want)
	}
}
