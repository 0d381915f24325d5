package versions

// Two-step minor upgrades (KEP-4330). The binary step moves kube-apiserver,
// kube-controller-manager and kube-scheduler to the binaries of minor N+1
// run with --emulated-version=kube=N: they keep N's APIs, features and
// storage versions, so going back to the N binaries is supported. The
// finishing step drops the flag, and the binaries run at N+1: from then on
// they may serve N+1's APIs and features and write what N cannot read back,
// so going back to N is not supported any more (lowering the emulated
// version again is).

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// CheckEmulationFinished: kube-apiserver, kube-controller-manager or
// kube-scheduler goes back a minor, from binaries of minor M whose
// two-step upgrade's finishing step has committed (they stopped emulating
// M-1) since the node last ran M-1. Unsupported: it cannot be ignored. A
// move back after an upgrade without --two-step stays KubernetesDowngrade's.
const CheckEmulationFinished = "EmulationFinished"

// TwoStep is a node whose binary step is taken and whose finishing step
// is not: kube-apiserver's binary is of minor Binary and emulates the
// older minor Emulated ("1.37", "1.36").
type TwoStep struct {
	Binary   string `json:"binary"`
	Emulated string `json:"emulated"`
}

// PendingTwoStep is n's two-step upgrade, when kube-apiserver emulates a
// minor older than its binary's; false otherwise (no emulation, or a
// version that cannot be told).
func PendingTwoStep(n *resolve.Node) (TwoStep, bool) {
	c := nodestate.KubeAPIServer
	bin, emu, ok := Emulating(n, c)
	if !ok || !emu.LessThan(bin) {
		return TwoStep{}, false
	}
	return TwoStep{Binary: MinorOf(bin), Emulated: MinorOf(emu)}, true
}

// Emulating is component c's binary minor in n and the minor it runs at:
// the one it emulates, else its binary's. False when c is not in n or its
// version cannot be told.
func Emulating(n *resolve.Node, c string) (bin, at *version.Version, ok bool) {
	v, ok := kubeVersion(n, c)
	if !ok {
		return nil, nil, false
	}
	bin = version.MajorMinor(v.Major(), v.Minor())
	if e := EmulatedVersion(n.State.ExtraArgs[c]); e != nil {
		return bin, e, true
	}
	return bin, bin, true
}

// BinaryStep is the binary step of a two-step upgrade from from to to:
// for each Kubernetes component whose binary moves up one minor and whose
// extra args in to name no --emulated-version, the value that keeps it at
// the minor it ran at ("kube=1.36"), by component. Empty when no binary
// moves up a minor.
func BinaryStep(from, to *resolve.Node) map[string]string {
	out := map[string]string{}
	for _, c := range kubernetesComponents {
		_, was, ok1 := Emulating(from, c)
		bin, _, ok2 := Emulating(to, c)
		if !ok1 || !ok2 || !was.LessThan(bin) {
			continue
		}
		if _, set := to.State.ExtraArgs[c][FlagEmulatedVersion]; set {
			continue
		}
		out[c] = "kube=" + MinorOf(was)
	}
	return out
}

// Ran is a committed transaction of the node: its ID, and the node states
// it took the node from and to.
type Ran struct {
	Txn      string
	From, To *resolve.Node
}

// finished reports whether r is a finishing step of component c at binary
// minor m: c ran the binary of m emulating an older minor before, and at m
// after.
func (r Ran) finished(c string, m *version.Version) bool {
	if r.From == nil {
		return false
	}
	fb, fa, ok1 := Emulating(r.From, c)
	tb, ta, ok2 := Emulating(r.To, c)
	return ok1 && ok2 && fb.EqualTo(m) && fa.LessThan(m) && tb.EqualTo(m) && ta.EqualTo(m)
}

// CheckBinaryRollback is the EmulationFinished check of a move from from
// to to, given history, which reads the node's committed transactions,
// newest first (a rollback --last leaves out the one it undoes; nil reads
// none). A Kubernetes component whose binary goes back one minor, from M,
// is refused when a finishing step of it at M committed since the node
// last ran it below M. history is called only for such a move: the
// journal is read when a binary goes back, not for every plan. Its error
// is returned.
func CheckBinaryRollback(from, to *resolve.Node, history func() ([]Ran, error)) ([]Finding, error) {
	var back []string
	for _, c := range kubernetesComponents {
		if fv, tv, ok := pair(from, to, c); ok && tv.LessThan(fv) && minorsBack(fv, tv) == 1 {
			back = append(back, c)
		}
	}
	if len(back) == 0 || history == nil {
		return nil, nil
	}
	ran, err := history()
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, c := range back {
		fv, tv, _ := pair(from, to, c)
		m := version.MajorMinor(fv.Major(), fv.Minor())
		for _, r := range ran {
			if bin, _, ok := Emulating(r.To, c); ok && bin.LessThan(m) {
				break // it ran below M since: what ran at M before is read back already
			}
			if !r.finished(c, m) {
				continue
			}
			out = append(out, Finding{Check: CheckEmulationFinished, Component: c, Unsupported: true, Message: fmt.Sprintf(
				"%s %s -> %s goes back to %s after the two-step upgrade's finishing step (transaction %s) let the %s binary stop emulating %s: it may have served %s's APIs and features and stored what %s cannot read back, and KEP-4330 supports going back to %s only while the %s binary emulates it; this cannot be ignored. Stay on %s (rollback --last of the finishing step lowers the emulated version to %s again), or restore the control plane from an etcd backup taken before %s",
				c, kv(fv), kv(tv), MinorOf(tv), r.Txn, MinorOf(m), MinorOf(tv), MinorOf(m), MinorOf(tv), MinorOf(tv), MinorOf(m), MinorOf(m), MinorOf(tv), r.Txn)})
			break
		}
	}
	return out, nil
}
