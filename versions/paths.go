package versions

// Upgrade paths: which moves from a node's current versions to a release's
// are allowed. Pure rules over two node states; the engine runs them (and
// its own etcd health check) before a plan or run writes anything.

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// The names of the upgrade-path checks, as --ignore-preflight-errors takes
// them (kubeadm's style).
const (
	// CheckUnsupportedVersion: a component of the target is at a version
	// outside the supported minors (KubernetesMinors, EtcdMinors).
	CheckUnsupportedVersion = "UnsupportedVersion"
	// CheckEtcdMinorSkip: etcd moves more than one minor at once.
	CheckEtcdMinorSkip = "EtcdMinorSkip"
	// CheckEtcdMinimumPatch: etcd moves to the next minor from a patch
	// below the one etcd's upgrade guide requires (EtcdUpgradeMinimum).
	CheckEtcdMinimumPatch = "EtcdMinimumPatch"
	// CheckEtcdDowngrade: etcd moves to a lower version, minor or patch.
	CheckEtcdDowngrade = "EtcdDowngrade"
	// CheckKubernetesMinorSkip: kube-apiserver, kube-controller-manager or
	// kube-scheduler moves more than one minor at once.
	CheckKubernetesMinorSkip = "KubernetesMinorSkip"
	// CheckKubernetesDowngrade: one of them moves to a lower version.
	CheckKubernetesDowngrade = "KubernetesDowngrade"
	// CheckComponentSkew: kube-controller-manager or kube-scheduler would
	// be newer than kube-apiserver, or more than one minor older, in the
	// target or while the upgrade runs (the version skew policy).
	CheckComponentSkew = "ComponentSkew"
)

// PathChecks are the checks UpgradePath runs, in the order it reports
// their findings.
var PathChecks = []string{
	CheckUnsupportedVersion,
	CheckEtcdMinorSkip, CheckEtcdMinimumPatch, CheckEtcdDowngrade,
	CheckKubernetesMinorSkip, CheckKubernetesDowngrade, CheckComponentSkew,
}

// EtcdUpgradeMinimum is, for an etcd minor, the lowest patch of it that may
// be upgraded to the next minor, from etcd's upgrade guides: "Before
// upgrading to 3.6, make sure that all of your 3.5 members are updated to
// 3.5.32 or later" (etcd.io/docs/v3.6/upgrades/upgrade_3_6; it said
// 3.5.26 until August 2026), and 3.6.11 for 3.7
// (etcd.io/docs/v3.7/upgrades/upgrade_3_7). A minor without an entry may
// be upgraded from any patch.
var EtcdUpgradeMinimum = map[string]string{
	"3.5": "3.5.32",
	"3.6": "3.6.11",
}

// kubernetesComponents are the components versioned with Kubernetes, in
// roster order (the order an upgrade changes them).
var kubernetesComponents = []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}

// Finding is one failed check: which, about which component, and a message
// that says what is wrong and which release would be valid.
type Finding struct {
	Check     string `json:"check"`
	Component string `json:"component,omitempty"`
	Message   string `json:"message"`
	// Unsupported: the move ends outside what Kubernetes or etcd support
	// (kubeadm refuses it unconditionally); --ignore-preflight-errors does
	// not let it through.
	Unsupported bool `json:"-"`
}

func (f Finding) String() string { return "[" + f.Check + "] " + f.Message }

// UpgradePath checks the move of a node from state from to state to (the
// release applied to it) and returns every failed check, in the order of
// PathChecks, nil when the move is allowed. A component whose version
// cannot be told on either side is left to the node state's validation
// (only UnsupportedVersion looks at the target alone).
func UpgradePath(from, to *resolve.Node) []Finding {
	var out []Finding
	record := func(unsupported bool) addFunc {
		return func(check, comp, format string, a ...any) {
			f := Finding{Check: check, Component: comp, Message: fmt.Sprintf(format, a...), Unsupported: unsupported}
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	add, unsupported := record(false), record(true)
	for _, c := range nodestate.Components {
		if to.Image(c) == "" {
			continue
		}
		v, err := to.Version(c)
		if err != nil || v == nil {
			continue
		}
		if err := Supported(c, v); err != nil {
			add(CheckUnsupportedVersion, c, "%s: use a release with %s at %s", err, c, supportedExample(c))
		}
	}
	if fv, tv, ok := pair(from, to, nodestate.Etcd); ok {
		etcdPath(fv, tv, add, unsupported)
	}
	for _, c := range kubernetesComponents {
		if fv, tv, ok := pair(from, to, c); ok {
			kubernetesPath(c, fv, tv, add, unsupported)
		}
	}
	skew(from, to, add)
	slices.SortStableFunc(out, func(a, b Finding) int {
		return slices.Index(PathChecks, a.Check) - slices.Index(PathChecks, b.Check)
	})
	return out
}

type addFunc func(check, comp, format string, a ...any)

// minorsBack is how many minors tv is below fv (a major down counts as
// more than one); 0 when it is not below.
func minorsBack(fv, tv *version.Version) int {
	switch {
	case tv.Major() < fv.Major():
		return 2
	case tv.Major() > fv.Major() || tv.Minor() >= fv.Minor():
		return 0
	}
	return int(fv.Minor() - tv.Minor())
}

// back says how far tv is below fv: "two minors (1.37 -> 1.35)".
func back(fv, tv *version.Version) string {
	if tv.Major() != fv.Major() {
		return fmt.Sprintf("a major version (%s -> %s)", MinorOf(fv), MinorOf(tv))
	}
	return fmt.Sprintf("%d minors (%s -> %s)", minorsBack(fv, tv), MinorOf(fv), MinorOf(tv))
}

// pair is component c's version before and after, false when c is not on
// both sides or a version is unknown.
func pair(from, to *resolve.Node, c string) (fv, tv *version.Version, ok bool) {
	if from.Image(c) == "" {
		return nil, nil, false
	}
	if to.Image(c) == "" {
		return nil, nil, false
	}
	fv, err1 := from.Version(c)
	tv, err2 := to.Version(c)
	if err1 != nil || err2 != nil || fv == nil || tv == nil {
		return nil, nil, false
	}
	return fv, tv, true
}

// etcdPath: one minor at a time, from the minimum patch, never down;
// never more than one minor down, whatever is ignored (unsupported).
func etcdPath(fv, tv *version.Version, add, unsupported addFunc) {
	e := nodestate.Etcd
	switch {
	case tv.LessThan(fv):
		if minorsBack(fv, tv) > 1 {
			unsupported(CheckEtcdDowngrade, e, "etcd %s -> %s goes back %s: etcd goes back one minor at a time (its downgrade protocol), and this cannot be ignored; go back one minor at a time, or restore etcd from a backup", fv, tv, back(fv, tv))
			return
		}
		if sameMinor(fv, tv) {
			add(CheckEtcdDowngrade, e, "etcd %s -> %s is a patch downgrade: run does not downgrade etcd; use a release with etcd %s or a later %s patch", fv, tv, fv, MinorOf(fv))
		} else {
			add(CheckEtcdDowngrade, e, "etcd %s -> %s is a downgrade: etcd %s refuses to start on data a %s member has run on, and run does not downgrade etcd (rollback --last of the upgrade that moved it does, with etcd's downgrade protocol); use a release with etcd %s or later", fv, tv, MinorOf(tv), MinorOf(fv), fv)
		}
		return
	case sameMinor(fv, tv):
		return
	}
	if tv.Major() != fv.Major() || tv.Minor() > fv.Minor()+1 {
		next := nextMinor(fv)
		msg := fmt.Sprintf("etcd %s -> %s skips %s: etcd upgrades one minor at a time; upgrade to a release with etcd %s.x first", fv, tv, skipped(fv, tv), next)
		if min, ok := EtcdUpgradeMinimum[next]; ok {
			msg += fmt.Sprintf(" (%s or later, so the next step to %s is allowed)", min, nextMinor(version.MustParseSemantic(min)))
		}
		add(CheckEtcdMinorSkip, e, "%s", msg)
	}
	if min, ok := EtcdUpgradeMinimum[MinorOf(fv)]; ok {
		if mv := version.MustParseSemantic(min); fv.LessThan(mv) {
			add(CheckEtcdMinimumPatch, e, "etcd %s -> %s: etcd upgrades from %s to %s only from %s or later (etcd's upgrade guide); upgrade to a release with etcd %s or a later %s patch first", fv, tv, MinorOf(fv), nextMinor(fv), min, min, MinorOf(fv))
		}
	}
}

// kubernetesPath: one minor at a time, never down; never more than one
// minor down, whatever is ignored (unsupported): kubeadm refuses it too.
func kubernetesPath(c string, fv, tv *version.Version, add, unsupported addFunc) {
	switch {
	case minorsBack(fv, tv) > 1:
		unsupported(CheckKubernetesDowngrade, c, "%s %s -> %s goes back %s: Kubernetes supports going back at most one minor, and this cannot be ignored; go back one minor at a time, or restore the control plane from a backup", c, kv(fv), kv(tv), back(fv, tv))
	case tv.LessThan(fv):
		add(CheckKubernetesDowngrade, c, "%s %s -> %s is a downgrade: run only upgrades (a rollback --last puts back the release before the last committed upgrade); otherwise use a release with %s %s or later", c, kv(fv), kv(tv), c, kv(fv))
	case tv.Major() != fv.Major() || tv.Minor() > fv.Minor()+1:
		add(CheckKubernetesMinorSkip, c, "%s %s -> %s skips %s: Kubernetes upgrades one minor at a time; upgrade to a release with %s %s.x first", c, kv(fv), kv(tv), skipped(fv, tv), c, nextMinor(fv))
	}
}

// skew checks the version skew policy between kube-apiserver and
// kube-controller-manager and kube-scheduler: neither newer than
// kube-apiserver, at most one minor older
// (kubernetes.io/releases/version-skew-policy). It holds in the target
// and in every state the upgrade passes through: the upgrade changes
// kube-apiserver first, then kube-controller-manager, then kube-scheduler,
// so the one state between that matters is the new kube-apiserver with
// the others as they were.
func skew(from, to *resolve.Node, add addFunc) {
	api, ok := kubeVersion(to, nodestate.KubeAPIServer)
	if !ok {
		return
	}
	// The state between is checked only when kube-apiserver's own move is
	// allowed: a skip or downgrade of it is reported already, and the skew
	// it causes on the way would only repeat it.
	oldAPI, ok := kubeVersion(from, nodestate.KubeAPIServer)
	apiMoves := ok && oldAPI.LessThan(api) && api.Major() == oldAPI.Major() && api.Minor() <= oldAPI.Minor()+1
	for _, c := range kubernetesComponents[1:] {
		if v, ok := kubeVersion(from, c); ok && apiMoves {
			skewOne(c, v, api, true, add)
		}
		if v, ok := kubeVersion(to, c); ok {
			skewOne(c, v, api, false, add)
		}
	}
}

// skewOne checks c at v against kube-apiserver at api; mid says the state
// is the one between (kube-apiserver upgraded, c not yet).
func skewOne(c string, v, api *version.Version, mid bool, add addFunc) {
	when, fix := "in the release", fmt.Sprintf("use a release with %s at %s or %s", c, MinorOf(api), prevMinor(api))
	if mid {
		when = fmt.Sprintf("while the upgrade runs (kube-apiserver is upgraded first, %s is still at %s)", c, kv(v))
		fix = fmt.Sprintf("upgrade %s to %s first, with a release that leaves kube-apiserver at its minor", c, prevMinor(api))
	}
	switch {
	case v.Major() != api.Major() || v.Minor() > api.Minor():
		add(CheckComponentSkew, c, "%s %s would be newer than kube-apiserver %s %s: the version skew policy allows %s at kube-apiserver's minor or one older; use a release with %s at %s or %s", c, kv(v), kv(api), when, c, c, MinorOf(api), prevMinor(api))
	case v.Minor()+1 < api.Minor():
		add(CheckComponentSkew, c, "%s %s would be more than one minor older than kube-apiserver %s %s: the version skew policy allows %s at kube-apiserver's minor or one older; %s", c, kv(v), kv(api), when, c, fix)
	}
}

func kubeVersion(st *resolve.Node, c string) (*version.Version, bool) {
	if st.Image(c) == "" {
		return nil, false
	}
	v, err := st.Version(c)
	return v, err == nil && v != nil
}

func sameMinor(a, b *version.Version) bool { return a.Major() == b.Major() && a.Minor() == b.Minor() }

func nextMinor(v *version.Version) string { return fmt.Sprintf("%d.%d", v.Major(), v.Minor()+1) }

func prevMinor(v *version.Version) string {
	if v.Minor() == 0 {
		return MinorOf(v)
	}
	return fmt.Sprintf("%d.%d", v.Major(), v.Minor()-1)
}

// skipped names the minors between fv and tv ("3.6", "1.35 and 1.36"); for
// a major change, just the next minor.
func skipped(fv, tv *version.Version) string {
	if fv.Major() != tv.Major() {
		return nextMinor(fv)
	}
	var ms []string
	for m := fv.Minor() + 1; m < tv.Minor(); m++ {
		ms = append(ms, fmt.Sprintf("%d.%d", fv.Major(), m))
	}
	switch len(ms) {
	case 1:
		return ms[0]
	case 2:
		return ms[0] + " and " + ms[1]
	}
	return ms[0] + " to " + ms[len(ms)-1]
}

// kv spells a Kubernetes version as Kubernetes does: v1.36.3.
func kv(v *version.Version) string { return "v" + v.String() }

// supportedExample is the supported minors of c as a phrase.
func supportedExample(c string) string {
	ms := minorsOf(c)
	if len(ms) == 0 {
		return "a supported version"
	}
	return ms[0] + " to " + ms[len(ms)-1]
}
