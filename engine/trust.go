package engine

// What the engine trusts of the journal. Paths and ids read back from it
// are used, as root, to create, rename and remove directories: each one is
// checked here, in one place, against the value the engine itself would
// derive, before a transaction is acted on.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// ErrUntrustedJournal is wrapped by UntrustedJournalError: the journal holds
// a path or id outside where the engine puts it.
var ErrUntrustedJournal = errors.New("the journal holds a path or id outside where it must be")

// UntrustedJournalError is the refusal of a transaction whose journaled
// field (Field, Value) is not what the engine derives for it (Want, when
// there is one answer). It is returned before anything of the transaction
// is acted on: nothing was created, moved or removed, and the journal was
// not written.
type UntrustedJournalError struct {
	Txn   string
	Field string
	Value string
	Want  string
	// Reason, when set, says what is wrong with a value that is where it
	// must be (the path there is a symlink).
	Reason string
}

func (e *UntrustedJournalError) Error() string {
	what := ""
	switch {
	case e.Reason != "":
		what = ", " + e.Reason
	case e.Want != "":
		what = fmt.Sprintf(", must be %q", e.Want)
	}
	return fmt.Sprintf("transaction %q: %s is %q%s: %v; nothing was touched", e.Txn, e.Field, e.Value, what, ErrUntrustedJournal)
}

// Unwrap makes errors.Is(err, ErrUntrustedJournal) hold.
func (e *UntrustedJournalError) Unwrap() error { return ErrUntrustedJournal }

// txnIDFormat is the format of the ids journal.Begin assigns: the UTC
// second of Begin and four lowercase hex digits.
var txnIDFormat = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{4}$`)

// validTxnID reports whether id has the format journal.Begin gives ids, and
// so is one path element with no separator, dot-dot or glob character.
func validTxnID(id string) bool {
	if !txnIDFormat.MatchString(id) {
		return false
	}
	_, err := time.Parse("20060102T150405Z", id[:16])
	return err == nil
}

// asideDir is where a rollback of transaction id moves etcd's data dir of
// st aside.
func asideDir(st *nodestate.NodeState, id string) string {
	return st.Etcd.DataDir + ".stratum-pre-rollback-" + id
}

// trustTxn checks every path and id of t and its records that the engine
// acts on against what the engine derives, and returns an
// *UntrustedJournalError for the first that differs:
//
//   - ID has the format journal.Begin assigns (it names the snapshot, the
//     etcd backup, staging globs and etcd's aside dir);
//   - Kind is an upgrade or a rollback-last;
//   - SnapshotDir is empty or exactly <snapshots root>/<ID>, and if that
//     exists it is a directory, not a symlink;
//   - EtcdBackup is empty or parses, and its path is exactly
//     <snapshots root>/<ID>.etcd.db, which if it exists is not a symlink;
//   - Source is empty in an upgrade; in a rollback-last it is empty or
//     exactly <snapshots root>/<S> of a committed transaction S of this
//     journal that is not itself a rollback-last;
//   - Down names known components;
//   - Changed and every target and record name known components, and every
//     target's derived file is a derived path of the node state To;
//   - a record's AsideDir is empty but in an etcd-restored record, where it
//     is exactly <etcd data dir of From>.stratum-pre-rollback-<ID>.
//
// It reads the journal and stats paths; it changes nothing.
func (e *Engine) trustTxn(t *journal.Txn, recs []journal.Record) error {
	bad := func(field, value, want string) error {
		return &UntrustedJournalError{Txn: t.ID, Field: field, Value: value, Want: want}
	}
	if !validTxnID(t.ID) {
		return bad("id", t.ID, "")
	}
	if !journal.KnownKind(t.Kind) {
		return bad("kind", t.Kind, "")
	}
	if t.SnapshotDir != "" {
		want := e.snaps.Path(t.ID)
		if t.SnapshotDir != want {
			return bad("snapshotDir", t.SnapshotDir, want)
		}
		if fi, err := os.Lstat(want); err == nil && (fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir()) {
			return &UntrustedJournalError{Txn: t.ID, Field: "snapshotDir", Value: t.SnapshotDir, Reason: "which is " + kind(fi) + ", not a directory"}
		}
	}
	if len(t.EtcdBackup) > 0 {
		var b etcddata.Backup
		dec := json.NewDecoder(bytes.NewReader(t.EtcdBackup))
		if err := dec.Decode(&b); err != nil {
			return bad("etcdBackup", string(t.EtcdBackup), "JSON of an etcd backup")
		}
		want := e.snaps.EtcdPath(t.ID)
		if b.Path != want {
			return bad("etcdBackup.path", b.Path, want)
		}
		if fi, err := os.Lstat(want); err == nil && !fi.Mode().IsRegular() {
			return &UntrustedJournalError{Txn: t.ID, Field: "etcdBackup.path", Value: b.Path, Reason: "which is " + kind(fi) + ", not a regular file"}
		}
	}
	if err := e.trustSource(t); err != nil {
		return err
	}
	from, err := nodestate.Parse(t.From)
	if err != nil {
		return fmt.Errorf("transaction %s: node state before: %w", t.ID, err)
	}
	to, err := nodestate.Parse(t.To)
	if err != nil {
		return fmt.Errorf("transaction %s: node state after: %w", t.ID, err)
	}
	for _, comp := range t.Changed {
		if !manifest.IsName(comp) {
			return bad("changed", comp, "")
		}
	}
	for _, comp := range t.Down {
		if !manifest.IsName(comp) {
			return bad("down", comp, "")
		}
	}
	for _, tg := range t.Targets {
		if !manifest.IsName(tg.Component) {
			return bad("targets.component", tg.Component, "")
		}
		for _, d := range tg.Derived {
			if !manifest.IsDerivedPath(to, d.Path) {
				return bad("targets.derived.path", d.Path, "")
			}
		}
	}
	for _, r := range recs {
		if r.Component != "" && !manifest.IsName(r.Component) {
			return bad("records.component", r.Component, "")
		}
		switch {
		case r.EtcdData == "" && r.Step != journal.StepEtcdData:
		case r.Step != journal.StepEtcdData || r.Component != nodestate.Etcd:
			return bad("records.etcdData", r.EtcdData, "")
		case r.EtcdData != journal.EtcdKeep && r.EtcdData != journal.EtcdRestore && r.EtcdData != journal.EtcdDowngrade:
			return bad("records.etcdData", r.EtcdData, journal.EtcdKeep+", "+journal.EtcdRestore+" or "+journal.EtcdDowngrade)
		}
		switch want := asideDir(from, t.ID); {
		case r.AsideDir == "":
		case r.Step != journal.StepEtcdRestored:
			return bad("records.asideDir", r.AsideDir, "")
		case r.AsideDir != want:
			return bad("records.asideDir", r.AsideDir, want)
		}
	}
	return nil
}

// kind names the type of fi for an error.
func kind(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	default:
		return "a " + m.Type().String() + " file"
	}
}

// trustSource checks the Source of t: none in an upgrade; in a
// rollback-last, none or exactly the snapshot directory of a committed
// transaction of this journal other than a rollback-last.
func (e *Engine) trustSource(t *journal.Txn) error {
	bad := func(want string) error {
		return &UntrustedJournalError{Txn: t.ID, Field: "source", Value: t.Source, Want: want}
	}
	if t.Kind != journal.KindRollbackLast {
		if t.Source != "" {
			return bad("")
		}
		return nil
	}
	if t.Source == "" {
		return nil // a rollback-last pinned its targets when it began
	}
	src := filepath.Base(t.Source)
	if !validTxnID(src) || src == t.ID || t.Source != e.snaps.Path(src) {
		return bad(e.snaps.Path("<id>") + " of a committed upgrade")
	}
	// Only an upgrade's undo names a source now; one of another committed
	// kind was begun by an older binary, and is trusted so that it can be
	// rolled back (wedgedUndo).
	st, err := e.j.Txn(src)
	if err != nil || st.Kind == journal.KindRollbackLast || st.Phase != journal.PhaseCommitted {
		return bad(e.snaps.Path("<id>") + " of a committed upgrade")
	}
	return nil
}

// trustOpen is trustTxn for a transaction read from the journal: with its
// records, which it returns once trusted.
func (e *Engine) trustOpen(t *journal.Txn) ([]journal.Record, error) {
	if !validTxnID(t.ID) {
		return nil, &UntrustedJournalError{Txn: t.ID, Field: "id", Value: t.ID}
	}
	recs, err := e.j.Records(t.ID)
	if err != nil {
		return nil, err
	}
	if err := e.trustTxn(t, recs); err != nil {
		return nil, err
	}
	return recs, nil
}
