// Package fault names the crash-injection points of the engine, in one
// place, as typed constants.
//
// In the product a point does nothing: Hit is an empty function the compiler
// removes, and the release binary holds no way to arm one. A binary built
// with the build tag stratumfault (the crash tests build one) arms the
// points listed in the environment variable documented in hit_armed.go and
// SIGKILLs itself on reaching one: no deferred function runs and no buffer is
// flushed, exactly as in a kill -9 or a power loss after the last fsync.
package fault

import "slices"

// Point is one place in the engine where a crash test may kill the process.
type Point string

// The points of an upgrade (and of a rollback-last, which applies like an
// upgrade), in the order a transaction reaches them.
const (
	AfterBegin      Point = "after-begin"
	AfterSnapshot   Point = "after-snapshot"
	AfterEtcdBackup Point = "after-etcd-backup"
	// AfterEtcdAnswered: the new etcd answered and that is journaled
	// (etcd's step only, after its after-replaced).
	AfterEtcdAnswered Point = "after-etcd-answered"
	// AfterEtcdSilent: the wait for the new etcd ended without an answer
	// and that is journaled; the rollback is next.
	AfterEtcdSilent Point = "after-etcd-silent"
	// AfterEtcdSnapshotForcing: etcd with --snapshot-count=1 answered
	// (the remediation of a WAL hazard, before etcd's own step).
	AfterEtcdSnapshotForcing Point = "after-etcd-snapshot-forcing"
	// AfterEtcdSnapshotCovered: a new snapshot covers the WAL tail, and
	// that is journaled.
	AfterEtcdSnapshotCovered Point = "after-etcd-snapshot-covered"
	// AfterEtcdDowngradeEnabling: this transaction journaled that it
	// enables etcd's downgrade, and has not sent the enable yet.
	AfterEtcdDowngradeEnabling Point = "after-etcd-downgrade-enabling"
	// AfterEtcdDowngradeEnabled: etcd enabled the downgrade; the wait for
	// the storage version is next.
	AfterEtcdDowngradeEnabled Point = "after-etcd-downgrade-enabled"
	// AfterEtcdDowngradeCancel: a downgrade this transaction enabled was
	// cancelled (read back), and that is not journaled yet.
	AfterEtcdDowngradeCancel Point = "after-etcd-downgrade-cancel"
	AfterApply               Point = "after-apply"
	BeforeCommit             Point = "before-commit"
	AfterCommit              Point = "after-commit"
)

// The points of a rollback.
const (
	AfterRollingBack   Point = "after-rolling-back"
	AfterEtcdDowngrade Point = "after-etcd-downgrade"
	AfterEtcdStop      Point = "after-etcd-stop"
	AfterEtcdRestore   Point = "after-etcd-restore"
	AfterRestore       Point = "after-restore"
	BeforeRolledBack   Point = "before-rolled-back"
	rollbackStepPrefix       = "rollback-"
)

// Step is a point in one component's step; Of gives its Point for a
// component.
type Step string

// The points of a component's step: before it is stopped for its write,
// after it was stopped (manifest removed, processes gone, the pod's name
// released) and before the write, after the write, after kubelet replaced
// the process, after the step's done record was prepared (applying) or
// journaled (rolling back).
const (
	BeforeWrite   Step = "before-write"
	AfterStop     Step = "after-stop"
	AfterWrite    Step = "after-write"
	AfterReplaced Step = "after-replaced"
	AfterStep     Step = "after-step"
)

// The points of a surge replacement (engine/surge.go), in a step that
// surges: after its surge copy was written, after the surge copy answered
// (and that was journaled), after the surge copy was removed and its
// processes are gone. Such a step stops nothing, so AfterStop is not on
// its path.
const (
	AfterSurgeWrite   Step = "after-surge-write"
	AfterSurgeActive  Step = "after-surge-active"
	AfterSurgeRemoved Step = "after-surge-removed"
)

// Of is the point of step s for component comp in an upgrade.
func (s Step) Of(comp string) Point { return Point(string(s) + ":" + comp) }

// InRollback is the point of step s for component comp in a rollback.
func (s Step) InRollback(comp string) Point {
	return Point(rollbackStepPrefix + string(s) + ":" + comp)
}

// Steps is every per-component step, in the order a step reaches them.
var Steps = []Step{BeforeWrite, AfterStop, AfterWrite, AfterReplaced, AfterStep}

// UpgradePoints is every point of an upgrade over roster, in order.
func UpgradePoints(roster []string) []Point {
	pts := []Point{AfterBegin, AfterSnapshot, AfterEtcdBackup}
	for _, comp := range roster {
		for _, s := range Steps {
			pts = append(pts, s.Of(comp))
			if s == AfterReplaced && comp == "etcd" {
				pts = append(pts, AfterEtcdAnswered)
			}
		}
	}
	return append(pts, AfterApply, BeforeCommit, AfterCommit)
}

// SurgeUpgradePoints is every point of an upgrade over roster whose steps
// of the components in surging surge, in order: the surge copy's write
// and answer before the canonical write, no stop, the surge copy's
// removal after the canonical pod answered.
func SurgeUpgradePoints(roster, surging []string) []Point {
	pts := UpgradePoints(roster)
	for _, comp := range surging {
		pts = slices.DeleteFunc(pts, func(p Point) bool { return p == AfterStop.Of(comp) })
		i := slices.Index(pts, BeforeWrite.Of(comp))
		pts = slices.Insert(pts, i, AfterSurgeWrite.Of(comp), AfterSurgeActive.Of(comp))
		i = slices.Index(pts, AfterStep.Of(comp))
		pts = slices.Insert(pts, i, AfterSurgeRemoved.Of(comp))
	}
	return pts
}

// EtcdDownPoints is every point of a transaction that moves etcd down a
// minor (a rollback --last of an upgrade that moved it up): the upgrade's,
// with etcd's downgrade (enabling, enabled, AfterEtcdDowngrade) before
// etcd's own step.
func EtcdDownPoints(roster []string) []Point {
	pts := UpgradePoints(roster)
	i := slices.Index(pts, AfterEtcdBackup) + 1
	return slices.Insert(pts, i, EtcdEnablePoints()...)
}

// EtcdEnablePoints is every point of etcd's downgrade before etcd's step
// of a transaction that moves etcd down a minor, in order.
func EtcdEnablePoints() []Point {
	return []Point{AfterEtcdDowngradeEnabling, AfterEtcdDowngradeEnabled, AfterEtcdDowngrade}
}

// EtcdDownFailPoints is every point of a transaction that moves etcd down
// a minor and fails after enabling etcd's downgrade, before etcd's step
// wrote its manifest: the enable, the rollback's cancel, the rollback.
func EtcdDownFailPoints(roster []string) []Point {
	return append([]Point{AfterEtcdDowngradeEnabling, AfterEtcdDowngradeEnabled, AfterEtcdDowngradeCancel}, RollbackPoints(roster)...)
}

// EtcdSilentPoints is every point of an upgrade whose new etcd never
// answers, from the journaled silence on: AfterEtcdSilent, then the
// rollback's points over roster.
func EtcdSilentPoints(roster []string) []Point {
	return append([]Point{AfterEtcdSilent}, RollbackPoints(roster)...)
}

// EtcdSnapshotPoints is every point of an upgrade that forces an etcd
// snapshot first, up to etcd's own step, in order.
func EtcdSnapshotPoints() []Point {
	return []Point{AfterEtcdSnapshotForcing, AfterEtcdSnapshotCovered}
}

// RollbackPoints is every point of a rollback over roster, in order.
func RollbackPoints(roster []string) []Point {
	pts := []Point{AfterRollingBack, AfterEtcdDowngrade, AfterEtcdStop, AfterEtcdRestore, AfterRestore}
	for _, comp := range roster {
		for _, s := range Steps {
			pts = append(pts, s.InRollback(comp))
		}
	}
	return append(pts, BeforeRolledBack)
}

// Fixed is every point that names no component, for the docs.
func Fixed() []Point {
	return slices.Clone([]Point{AfterBegin, AfterSnapshot, AfterEtcdBackup, AfterEtcdSnapshotForcing, AfterEtcdSnapshotCovered, AfterEtcdDowngradeEnabling, AfterEtcdDowngradeEnabled, AfterEtcdDowngradeCancel, AfterEtcdAnswered, AfterEtcdSilent, AfterApply, BeforeCommit, AfterCommit,
		AfterRollingBack, AfterEtcdDowngrade, AfterEtcdStop, AfterEtcdRestore, AfterRestore, BeforeRolledBack})
}
