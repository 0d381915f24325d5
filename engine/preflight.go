package engine

// The pre-flight checks of an upgrade, run by the plan before anything is
// written: the upgrade-path rules of package versions, and etcd's health
// before an upgrade that changes etcd.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// CheckEtcdHealth is the pre-flight check that etcd answers its health
// endpoint before an upgrade that changes etcd's manifest: the etcd backup
// taken before the change needs it, and so does a rolling replacement.
// Nothing else checks etcd before the transaction begins.
const CheckEtcdHealth = "EtcdHealth"

// CheckEtcdWALHistory is the pre-flight check that etcd's WAL holds, after
// its newest snapshot, no entry the new etcd minor refuses to replay at
// start (etcddata.WALScan.Hazards): such an etcd panics at once, and the
// upgrade can only roll back.
const CheckEtcdWALHistory = "EtcdWALHistory"

// CheckEtcdV2Store is the pre-flight check that etcd's v2 store (its
// newest snapshot's, with the WAL's v2 requests replayed) holds no custom
// content when etcd moves to 3.6 or later: etcd 3.6 refuses to start on
// it, and no snapshot removes it; the content is the operator's.
const CheckEtcdV2Store = "EtcdV2Store"

// IgnoreAll, in UpgradeOptions.IgnorePreflight, lets every check through.
const IgnoreAll = "all"

// PreflightChecks is the name of every pre-flight check, in the order
// their failures are reported.
func PreflightChecks() []string {
	return append(slices.Concat(versions.PathChecks, versions.EmulationChecks), CheckEtcdHealth, CheckEtcdWALHistory, CheckEtcdV2Store, CheckImagePull, CheckStaticPodKubelet, CheckEtcdMemberSkew, CheckAPIServerSkew, CheckEmulationClusterSkew)
}

// CheckIgnore validates the names of checks to ignore: each a known check
// or IgnoreAll. An unknown name is an error that lists the known ones.
func CheckIgnore(names []string) error {
	known := PreflightChecks()
	var bad []string
	for _, n := range names {
		if n != IgnoreAll && !slices.Contains(known, n) {
			bad = append(bad, fmt.Sprintf("%q", n))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("unknown pre-flight check %s: the checks are %s, or %s for every one", strings.Join(bad, ", "), strings.Join(known, ", "), IgnoreAll)
	}
	return nil
}

// ErrPreflight is wrapped by every *PreflightError.
var ErrPreflight = errors.New("pre-flight checks failed")

// PreflightError is an upgrade refused by its pre-flight checks before
// anything was written: every failed check that was not ignored, and the
// ignored ones (to be shown as warnings).
type PreflightError struct {
	// Subject is what was refused: "release v1.37.2", "node state v1.36.3".
	Subject string
	Failed  []versions.Finding
	Ignored []versions.Finding
}

func (e *PreflightError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s refused by %d pre-flight check(s); nothing was written:", e.Subject, len(e.Failed))
	for _, f := range e.Failed {
		b.WriteString("\n\t[ERROR " + f.Check + "] " + f.Message)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrPreflight) hold.
func (e *PreflightError) Unwrap() error { return ErrPreflight }

// Ignorable reports whether --ignore-preflight-errors could let every
// failure through: none is outside what Kubernetes and etcd support.
func (e *PreflightError) Ignorable() bool {
	return !slices.ContainsFunc(e.Failed, func(f versions.Finding) bool { return f.Unsupported })
}

// UpgradeOptions are the options of one plan or run.
type UpgradeOptions struct {
	// IgnorePreflight names the pre-flight checks whose failure is only a
	// warning (Plan.Ignored, and the transaction's IgnoredChecks); IgnoreAll
	// names every one. Validate with CheckIgnore.
	IgnorePreflight []string
	// members is the cluster's member count the transaction read from
	// etcd's member list (topology.go); 0, as for a plan outside a
	// transaction, is unknown, and the stricter check of a single member
	// applies (etcd's health refused at once, its data dir checked).
	members int
	// Kubelet, if set, reads the version of the node's running kubelet
	// for StaticPodKubelet, as Config.Kubelet does (an Engine's plans use
	// that one when this is nil): for a plan outside an Engine.
	Kubelet func(ctx context.Context) (string, error)
	// log, set by an Engine, is where an unread kubelet is warned of, and
	// no Kubelet too; nil: slog.Default(), and no Kubelet says nothing (a
	// plan with no API server to ask).
	log *slog.Logger
	// TwoStep takes a release's minor move as the binary step of a
	// two-step upgrade: each Kubernetes binary that moves up a minor
	// emulates the minor it replaces (--emulated-version); Finish takes
	// the finishing step. A release that moves no binary up a minor is
	// refused (ErrNoMinorMove).
	TwoStep bool
	// history reads the node's committed transactions for
	// EmulationFinished (Engine.ranStates, WithJournal), only when a
	// binary goes back a minor; nil outside an Engine reads none.
	history func() ([]versions.Ran, error)
}

// preflight is how planTo runs the checks.
type preflight struct {
	ignore []string
	// members is UpgradeOptions.members.
	members int
	// kubelet reads UpgradeOptions.Kubelet.
	kubelet liveKubelet
	// procs answers EtcdHealth; nil fails it as unknown.
	procs Processes
	// subject names the target in a refusal: "release v1.37.2".
	subject string
	// state: the target is a node state (apply), not a release (run).
	state bool
	// history is UpgradeOptions.history.
	history func() ([]versions.Ran, error)
}

func (p preflight) ignores(check string) bool {
	return slices.Contains(p.ignore, IgnoreAll) || slices.Contains(p.ignore, check)
}

// etcdHealth is the EtcdHealth check: one health request to the etcd that
// runs from st's manifest. Nil when it answers.
func (p preflight) etcdHealth(ctx context.Context, st *nodestate.NodeState) *versions.Finding {
	fail := func(format string, a ...any) *versions.Finding {
		return &versions.Finding{Check: CheckEtcdHealth, Component: nodestate.Etcd, Message: fmt.Sprintf(format, a...)}
	}
	what, again := "the release", "run the same release again"
	if p.state {
		what, again = "the node state", "apply the same node state again"
	}
	t, err := manifest.Target(st, nodestate.Etcd)
	if err != nil {
		return fail("etcd's health endpoint is unknown (%v): %s changes etcd, which is changed only while it answers", err, what)
	}
	if p.procs == nil {
		return fail("etcd's health cannot be checked here (no process scanner): %s changes etcd, which is changed only while it answers", what)
	}
	if p.procs.Active(ctx, t) {
		return nil
	}
	if p.members > 1 {
		// A member of a multi-member cluster is briefly not ready while
		// its cluster elects a leader: another node's etcd step moves the
		// leadership off its member and stops it, and a run started on
		// every node at once makes this check during exactly that. Wait
		// out an election before refusing.
		if err := p.procs.WaitActive(ctx, t, electionWait); err == nil {
			return nil
		}
		return fail("etcd does not answer %s (waited %s, longer than a leader election takes): %s changes etcd, and its data backup and replacement need a healthy etcd; make etcd healthy first (its container log, `etcdctl endpoint status --cluster`), then %s", t.Health, electionWait, what, again)
	}
	return fail("etcd does not answer %s: %s changes etcd, and its data backup and replacement need a healthy etcd; make etcd healthy first (its container log), then %s", t.Health, what, again)
}

// etcdWAL is the EtcdWALHistory and EtcdV2Store checks of a move of etcd
// from st to to: a read-only scan of the member's WAL from its newest
// snapshot on. None when etcd stays within its minor, when the data dir
// has no WAL yet, or when the new minor replays every entry and finds no
// custom v2 content.
func (p preflight) etcdWAL(st, to *nodestate.NodeState) []versions.Finding {
	_, minor, moves := etcdMinors(&run{from: st, to: to})
	if !moves {
		return nil
	}
	walDir := filepath.Join(st.Etcd.DataDir, "member", "wal")
	if _, err := os.Stat(walDir); errors.Is(err, fs.ErrNotExist) {
		return nil // no etcd ran on this data dir yet: nothing to replay
	}
	scan, err := etcddata.ScanWAL(st.Etcd.DataDir)
	if err != nil {
		return []versions.Finding{{Check: CheckEtcdWALHistory, Component: nodestate.Etcd, Message: fmt.Sprintf(
			"etcd's WAL cannot be read to check what etcd %s replays at start: %v; an etcd snapshot cannot be forced without it (docs/versions.md)", minor, err)}}
	}
	// Entries the new minor refuses (scan.Hazards) fail no check: the
	// transaction's first journaled step forces a snapshot that covers
	// them (forceEtcdSnapshot). Custom v2 content does: a snapshot keeps
	// it, and etcd 3.6 refuses it there too.
	if scan.V2StoreRefused(minor) && !v2CheckSkipped(to) {
		more := ""
		if n := scan.V2CustomTotal - len(scan.V2Custom); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		auth := ""
		if slices.ContainsFunc(scan.V2Custom, func(k string) bool { return strings.HasPrefix(k, "/2/") }) {
			auth = "; /2/users and /2/roles are v2 auth's users and roles: remove them with ETCDCTL_API=2 etcdctl user remove and role remove (after auth disable)"
		}
		return []versions.Finding{{Check: CheckEtcdV2Store, Component: nodestate.Etcd, Message: fmt.Sprintf(
			"etcd's v2 store holds custom content (%s%s; /1/KEY is the v2 API's key /KEY): etcd %s refuses to start on it (\"detected disallowed custom content in v2store\"), and no snapshot removes it; "+
				"move what you need to the v3 API and delete the rest through the v2 API on this etcd (started with --enable-v2: ETCDCTL_API=2 etcdctl rm --recursive /KEY)%s, then plan again; or, to have etcd %s drop it, add --v2-deprecation=write-only-drop-data to etcd's extraArgs (docs/versions.md)",
			strings.Join(scan.V2Custom, ", "), more, minor, auth, minor)}}
	}
	return nil
}

// v2CheckSkipped reports whether the target etcd is told not to refuse
// custom v2 content: --v2-deprecation=write-only-skip-check (etcd 3.6.16
// and later start anyway) or write-only-drop-data (they wipe it).
func v2CheckSkipped(to *nodestate.NodeState) bool {
	for _, v := range to.ExtraArgs[nodestate.Etcd]["v2-deprecation"] {
		if v == "write-only-skip-check" || v == "write-only-drop-data" {
			return true
		}
	}
	return false
}

// electionWait bounds how long the EtcdHealth check of a multi-member
// cluster's member waits for it to answer: etcd elects a leader within a
// few election timeouts (1 s each by default).
const electionWait = 10 * time.Second

// settle splits the findings into failed and ignored ones, and returns the
// refusal, or nil when every failure was ignored. A finding whose result
// Kubernetes or etcd do not support (Unsupported) is never ignored.
func (p preflight) settle(findings []versions.Finding) ([]versions.Finding, error) {
	var failed, ignored []versions.Finding
	for _, f := range findings {
		if p.ignores(f.Check) && !f.Unsupported {
			ignored = append(ignored, f)
		} else {
			failed = append(failed, f)
		}
	}
	if len(failed) > 0 {
		return ignored, &PreflightError{Subject: p.subject, Failed: failed, Ignored: ignored}
	}
	return ignored, nil
}

// ignoredChecks is the journal's form of the ignored findings.
func ignoredChecks(fs []versions.Finding) []journal.IgnoredCheck {
	var out []journal.IgnoredCheck
	for _, f := range fs {
		out = append(out, journal.IgnoredCheck{Check: f.Check, Component: f.Component, Message: f.Message})
	}
	return out
}
