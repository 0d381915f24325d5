package journal

import (
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/ciq/stratum-upgrade/proc"
)

// Phase is where an upgrade transaction stands.
type Phase string

// The phases of a transaction. Committed, rolled-back and rollback-failed
// are terminal: a transaction in one of them is closed and never changes.
const (
	PhasePlanned        Phase = "planned"
	PhaseSnapshotted    Phase = "snapshotted"
	PhaseApplying       Phase = "applying"
	PhaseVerifying      Phase = "verifying"
	PhaseCommitted      Phase = "committed"
	PhaseRollingBack    Phase = "rolling-back"
	PhaseRolledBack     Phase = "rolled-back"
	PhaseRollbackFailed Phase = "rollback-failed"
)

// Phases is every phase, in the order a transaction normally passes them.
// Callers must not modify it.
var Phases = []Phase{
	PhasePlanned, PhaseSnapshotted, PhaseApplying, PhaseVerifying,
	PhaseCommitted, PhaseRollingBack, PhaseRolledBack, PhaseRollbackFailed,
}

// Open reports whether a transaction in phase p is still open: every phase
// but committed, rolled-back and rollback-failed. An unknown phase is not
// open.
func (p Phase) Open() bool {
	switch p {
	case PhasePlanned, PhaseSnapshotted, PhaseApplying, PhaseVerifying, PhaseRollingBack:
		return true
	}
	return false
}

// Known reports whether p is one of Phases.
func (p Phase) Known() bool {
	for _, q := range Phases {
		if p == q {
			return true
		}
	}
	return false
}

// Kinds of transaction.
const (
	// KindUpgrade moves the node from node state From to To: a release's
	// run, or a node state's apply.
	KindUpgrade      = "upgrade"
	KindRollbackLast = "rollback-last"
	// KindRestart restarts components of the node state as it is (From
	// and To are the same): each target is its render with a new
	// restarted-at stamp.
	KindRestart = "restart"
	// KindStop removes components' manifests and waits for them to exit;
	// To lists them as stopped. Their targets are empty (no manifest).
	KindStop = "stop"
	// KindStart renders stopped components again; To no longer lists
	// them as stopped.
	KindStart = "start"
)

// Kinds is every kind of transaction, in the order they were added.
var Kinds = []string{KindUpgrade, KindRollbackLast, KindRestart, KindStop, KindStart}

// KnownKind reports whether k is one of Kinds.
func KnownKind(k string) bool {
	for _, q := range Kinds {
		if k == q {
			return true
		}
	}
	return false
}

// Txn is one upgrade transaction as stored in the journal. Every value a
// Journal returns is a fresh copy: modifying it changes nothing stored.
type Txn struct {
	// ID is sortable by start time, e.g. 20261202T130405Z-1a2b; assigned by Begin.
	ID string `json:"id"`
	// Kind is one of Kinds.
	Kind  string `json:"kind"`
	Phase Phase  `json:"phase"`
	// Started is set by Begin, Updated by every write, Ended when the
	// transaction reaches a terminal phase (zero while open).
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	Ended   time.Time `json:"ended,omitzero"`
	// From and To are the node state YAML before and after. Commit sets To
	// to the state it commits.
	From []byte `json:"from,omitempty"`
	To   []byte `json:"to,omitempty"`
	// Release is the release file a run was given; empty when the
	// transaction applies a node state (apply --state).
	Release []byte `json:"release,omitempty"`
	// Source is the retained snapshot directory a rollback-last puts back.
	Source string `json:"source,omitempty"`
	// Changed is the components whose manifest changes, in roster order.
	Changed []string `json:"changed,omitempty"`
	// Targets are the exact bytes the transaction writes, one per changed
	// component, fixed when it was planned: every write and every resume
	// writes these, whatever the profile files or the binary's renderer say
	// later. Absent in a transaction begun by a schema-1 binary; the engine
	// then pins them on its first resume.
	Targets []Target `json:"targets,omitempty"`
	// IgnoredChecks are the pre-flight checks that failed when the
	// transaction was planned and that the operator let through
	// (--ignore-preflight-errors); fixed at Begin. Schema 4.
	IgnoredChecks []IgnoredCheck `json:"ignoredChecks,omitempty"`
	// Down is the components of the roster that did not answer when the
	// transaction began (crash-looping, or never started): a rollback
	// restores their manifests but does not demand that they come back.
	// Fixed at Begin; absent in a transaction begun by an older binary (a
	// rollback then demands every component). Schema 5.
	Down        []string `json:"down,omitempty"`
	SnapshotDir string   `json:"snapshotDir,omitempty"`
	// EtcdBackup is opaque to the journal (the engine stores JSON: path,
	// hash, size, revision).
	EtcdBackup []byte `json:"etcdBackup,omitempty"`
	// Reason says why the transaction rolled back or failed.
	Reason string `json:"reason,omitempty"`
	// Detail is opaque to the journal (e.g. per-component state of a
	// failed rollback).
	Detail []byte `json:"detail,omitempty"`
}

// storedTxn is the value of txns/<id>: Txn plus the order of Begin.
type storedTxn struct {
	Txn
	Seq uint64 `json:"seq"`
}

// Record is one journaled transition. Seq, Time and BootID are assigned by
// the journal when the record is written; whatever the caller puts there is
// overwritten.
type Record struct {
	// Seq numbers the records of one transaction 1, 2, ...
	Seq uint64 `json:"seq"`
	// Time is when the record was written.
	Time time.Time `json:"time"`
	// BootID is the boot id at the time the record was written.
	BootID string `json:"bootID"`
	// Phase is the phase the record belongs to. Empty means the phase the
	// write that carries it sets.
	Phase Phase `json:"phase"`
	// Step says what happened; one of Steps.
	Step      Step   `json:"step,omitempty"`
	Component string `json:"component,omitempty"`
	// ProcMark is the mark taken before a manifest write (StepMark).
	ProcMark *proc.Mark `json:"procMark,omitempty"`
	// Stamp is the restarted-at value the engine chose (StepMark).
	Stamp string `json:"stamp,omitempty"`
	// Processes are the component's processes once it answered (StepDone):
	// the soak tells a crash loop by a change of them.
	Processes []proc.Process `json:"processes,omitempty"`
	// AsideDir is where the data dir etcd ran on was moved when its backup
	// was restored (StepEtcdRestored).
	AsideDir string `json:"asideDir,omitempty"`
	// EtcdData is a rollback's decision about etcd's data, EtcdKeep or
	// EtcdRestore, and Why what it was decided from (StepEtcdData).
	// Schema 5.
	EtcdData string `json:"etcdData,omitempty"`
	Why      string `json:"why,omitempty"`
	// EtcdTarget is the minor ("3.5") etcd's downgrade goes to
	// (StepEtcdDowngradeEnable).
	EtcdTarget string `json:"etcdTarget,omitempty"`
	// Pods are static pod UIDs (StepSurge): the old instance's when the
	// surge copy is about to be written, the surge instance's once it
	// answered.
	Pods []string `json:"pods,omitempty"`
}

// The decisions of a StepEtcdData record.
const (
	// EtcdKeep: etcd's data stays as it is; only its manifest is rolled
	// back (the old etcd served the data, or the other members hold it).
	EtcdKeep = "keep"
	// EtcdRestore: etcd's data is restored from the transaction's backup
	// (a newer etcd ran on it, or may have).
	EtcdRestore = "restore"
	// EtcdDowngrade: a newer etcd minor wrote to a single member's data
	// and answers, or a member of several whose cluster version moved
	// answers: etcd's downgrade protocol moves the data back to the old
	// minor, every write kept (StepEtcdDowngraded once done). If etcd
	// refuses, a single member's later etcd-data record decides restore;
	// a member of several has no backup, and the rollback fails. Schema 7.
	EtcdDowngrade = "downgrade"
)

// Step is what a Record says happened.
type Step string

// The steps of the records the engine writes (docs/architecture.md).
const (
	// StepMark: a process mark taken before a component's manifest write.
	StepMark Step = "mark"
	// StepReplaced: kubelet replaced a component's process (before it
	// answered). Journaled for etcd only: a rollback restores etcd's data
	// only when a newer etcd ran on it.
	StepReplaced Step = "replaced"
	// StepDone: a component was replaced and answered.
	StepDone Step = "done"
	// StepRestored: the manifest snapshot was written back.
	StepRestored Step = "restored"
	// StepEtcdData: a rollback decided what becomes of etcd's data
	// (Record.EtcdData), journaled before it stops etcd; a resumed
	// rollback follows it. Schema 5.
	StepEtcdData Step = "etcd-data"
	// StepEtcdRestored: etcd's data was restored from its backup.
	StepEtcdRestored Step = "etcd-restored"
	// StepEtcdAnswered: the etcd an upgrade wrote answered its health
	// endpoint, so it ran on the data and wrote to it. Schema 7.
	StepEtcdAnswered Step = "etcd-answered"
	// StepEtcdSilent: the wait for the etcd an upgrade wrote ended without
	// an answer, watched by the run that wrote its manifest from the stop
	// of the old etcd on: no newer etcd wrote to the data up to this
	// record. Schema 7.
	StepEtcdSilent Step = "etcd-silent"
	// StepEtcdDowngraded: etcd's downgrade protocol moved the data back
	// to the old minor (Record.Why says to which storage version, at
	// which revision). Schema 7.
	StepEtcdDowngraded Step = "etcd-downgraded"
	// StepEtcdSnapshot: the remediation of a WAL history the new etcd
	// refuses (engine's EtcdWALHistory), before etcd's own step. Why
	// "forcing" with ProcMark and Stamp: journaled before etcd's manifest
	// is rewritten with --snapshot-count=1; Why "covered": a new snapshot
	// covers the WAL tail, so etcd's own step may go on. No bump: a binary
	// that does not know the step refuses the transaction when it reads it.
	StepEtcdSnapshot Step = "etcd-snapshot"
	// StepEtcdDowngradeEnable: this transaction enables etcd's downgrade
	// to Record.EtcdTarget. Why "enabling": journaled before the enable is
	// sent, so a crash right after it still knows who enabled it; Why
	// "cancelled": the cancel was read back, none enabled; Why "refused":
	// etcd refused the enable, so this transaction enabled none. A
	// downgrade enabled while applying is cancelled on every path that
	// does not swap etcd's binary (docs/reliability.md). No bump, as
	// etcd-snapshot.
	StepEtcdDowngradeEnable Step = "etcd-downgrade-enable"
	// StepSurge: a surge replacement of a component (the new instance
	// started beside the old under a second static pod name). Why
	// "writing" with ProcMark and Pods (the old instance's): journaled
	// before the surge copy's manifest is written; "active" with Pods
	// (the surge instance's): it answered, the canonical manifest is
	// next; "removed": the surge copy's manifest is gone and so are its
	// processes. A surge begun and not removed is removed by whatever
	// runs next (resume, the rollback) before the component's step goes
	// on. No bump, as etcd-snapshot.
	StepSurge Step = "surge"
	// StepVerified: the transaction passed its soak and committed.
	StepVerified Step = "verified"
)

// The stages of a StepSurge record (Record.Why).
const (
	SurgeWriting = "writing"
	SurgeActive  = "active"
	SurgeRemoved = "removed"
)

// The stages of a StepEtcdDowngradeEnable record (Record.Why).
const (
	EtcdDowngradeEnabling  = "enabling"
	EtcdDowngradeCancelled = "cancelled"
	EtcdDowngradeRefused   = "refused"
)

// The stages of a StepEtcdSnapshot record (Record.Why).
const (
	EtcdSnapshotForcing = "forcing"
	EtcdSnapshotCovered = "covered"
)

// Steps is every step. Callers must not modify it.
var Steps = []Step{StepMark, StepReplaced, StepDone, StepRestored, StepEtcdData, StepEtcdRestored, StepEtcdAnswered, StepEtcdSilent, StepEtcdDowngraded, StepEtcdSnapshot, StepEtcdDowngradeEnable, StepSurge, StepVerified}

// Known reports whether s is one of Steps.
func (s Step) Known() bool { return slices.Contains(Steps, s) }

// IgnoredCheck is a failed pre-flight check an operator let through: its
// name (as --ignore-preflight-errors takes it), the component it is
// about, and its message.
type IgnoredCheck struct {
	Check     string `json:"check"`
	Component string `json:"component,omitempty"`
	Message   string `json:"message"`
}

// Target is what a transaction writes for one component.
type Target struct {
	Component string `json:"component"`
	// Manifest is the manifest's exact bytes; empty means the transaction
	// removes the component's manifest.
	Manifest []byte `json:"manifest,omitempty"`
	// Derived are files written before the manifest (kube-apiserver's
	// admission configuration under the cis profile).
	Derived []File `json:"derived,omitempty"`
}

// File is a file's path, exact bytes and permission bits.
type File struct {
	Path string      `json:"path"`
	Data []byte      `json:"data"`
	Mode fs.FileMode `json:"mode"`
}

// Target returns the target of comp, if the transaction has one.
func (t *Txn) Target(comp string) (Target, bool) {
	for _, tg := range t.Targets {
		if tg.Component == comp {
			return tg, true
		}
	}
	return Target{}, false
}

// checkPhase returns an error unless p is a known phase.
func checkPhase(p Phase) error {
	if !p.Known() {
		return fmt.Errorf("unknown phase %q (known: %v)", p, Phases)
	}
	return nil
}
