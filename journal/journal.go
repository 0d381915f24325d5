// Package journal is stratum-upgrade's write-ahead journal: one bbolt file
// holding the persisted node state and every upgrade transaction with the
// transitions it went through.
//
// Every write is one bbolt read-write transaction, committed before the
// method returns; bbolt's commit fsyncs the file (NoSync is never set), so
// when a write method returns nil the change survives a crash or power
// loss. When it is refused (closed transaction, bad phase, invalid state,
// ...) nothing was stored. Only an error from the commit itself (an I/O or
// fsync failure, reported as "commit: ...") leaves it unknown whether the
// change reached the disk; reopen the journal and read it back. The engine
// records each transition before it acts on it; Append and Update take the
// records of "step i done" and "step i+1 started" together so a step costs
// one commit.
//
// Values handed out are always copies decoded from the stored bytes: no
// returned slice points into bbolt's memory map or is shared with a later
// read. The file layout is documented in schema.go.
//
// Only one process uses the journal at a time: Open takes bbolt's flock and
// fails with ErrLocked when another process holds it.
package journal

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// DefaultPath is where the journal lives on a node.
const DefaultPath = "/var/lib/stratum/stratum.db"

// DefaultLockTimeout is how long Open waits for another process to release
// the journal when Options.LockTimeout is zero.
const DefaultLockTimeout = 2 * time.Second

// Errors a caller may test for with errors.Is. Returned errors wrap them
// with the journal's path and what was being done.
var (
	// ErrLocked: another stratum-upgrade holds the journal.
	ErrLocked = errors.New("another stratum-upgrade holds the journal")
	// ErrTxnOpen: a transaction is open, so Begin or PutNodeState is refused.
	ErrTxnOpen = errors.New("a transaction is open")
	// ErrNeedsMigration: a read-only Open found an older schema; a
	// read-write Open migrates it.
	ErrNeedsMigration = errors.New("it needs migrating")
	// ErrNoState: no node state has been imported yet.
	ErrNoState = errors.New("no node state in the journal; import one first")
	// ErrNoTxn: no transaction has the given id.
	ErrNoTxn = errors.New("no such transaction")
	// ErrTxnClosed: the transaction has a terminal phase and never changes again.
	ErrTxnClosed = errors.New("transaction is closed")
	// ErrCorrupt: the file is damaged or is not a journal at all. Returned
	// errors are a *CorruptError, which names the file and says what is
	// wrong. Nothing was written to the file.
	ErrCorrupt = errors.New("the journal is damaged")
)

// CorruptError is the error of an Open or of a method that found the file
// damaged: not a bbolt database at all, a bbolt page structure that does
// not hold together (a garbage freelist, branch or leaf page, a truncated
// file), or a panic of bbolt inside a transaction. errors.Is(err,
// ErrCorrupt) holds for it.
//
// When it is returned nothing was written to the file by the call that
// returned it: Open checks the file before bbolt touches it, and a write
// whose bbolt transaction panicked was never committed. After a
// transaction panicked, the Journal refuses every further call with the
// same error; Close it.
type CorruptError struct {
	Path string
	// Err says what is damaged.
	Err error
}

func (e *CorruptError) Error() string {
	var nb *notBoltError
	if errors.As(e.Err, &nb) {
		return fmt.Sprintf("journal %s is %v: it is not a stratum-upgrade journal or it is damaged; nothing was written to it", e.Path, nb)
	}
	return fmt.Sprintf("journal %s is damaged: %v; nothing was written to it", e.Path, e.Err)
}

// Unwrap returns ErrCorrupt and the detail.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// lockedError is the error of an Open that timed out on the flock.
type lockedError struct{ path string }

func (e *lockedError) Error() string {
	return fmt.Sprintf("journal %s is locked: another stratum-upgrade is running (pid unknown)", e.path)
}

func (e *lockedError) Unwrap() error { return ErrLocked }

// Options configure Open. The zero value is the production configuration.
type Options struct {
	// LockTimeout is how long Open waits for another process's lock;
	// zero or negative means DefaultLockTimeout. There is no "wait forever".
	LockTimeout time.Duration
	// ReadOnly opens without writing: no creation, no migration, every
	// write method fails. bbolt still takes a shared lock, so a read-only
	// Open also waits for (and times out on) a writer.
	ReadOnly bool
	// BootID returns the current boot id; it is called once per write that
	// carries records. Default: /proc/sys/kernel/random/boot_id.
	BootID func() (string, error)
	// Now is the clock; default time.Now. Times are stored in UTC.
	Now func() time.Time
}

// Journal is an open journal file. Its methods are safe for concurrent use;
// bbolt serialises the writes.
type Journal struct {
	db *bolt.DB
	// broken is the *CorruptError of a transaction that panicked: every
	// later call returns it, because bbolt's state after a panic in a
	// transaction is unknown.
	broken  atomic.Pointer[CorruptError]
	stuck   atomic.Bool // a read-write transaction panicked: its lock may still be held
	path    string
	bootID  func() (string, error)
	now     func() time.Time
	commits atomic.Uint64
	ready   bool // migrated to currentVersion; set once by Open
}

// Open opens the journal at path, creating it (mode 0600, parent directory
// 0700) when it does not exist and Options.ReadOnly is false, and migrates
// it to the current schema version in one bbolt transaction.
//
// Before bbolt reads the file, Open checks its page structure under the
// file's lock (verifyFile: about 20 ms for a journal of 1000 transactions,
// 33 MB): a file that is not a bbolt database or is damaged (garbage in a
// page, truncated) is refused with a *CorruptError (errors.Is ErrCorrupt)
// instead of making bbolt panic or fault.
//
// Open refuses, writing nothing: a symbolic link at path; a path that is
// not a regular file; a damaged file or one that is not a bbolt database; a file whose
// schema version is newer than this binary knows; in read-only mode, a
// missing file or one that needs a migration. When another process holds
// the file, Open gives up after Options.LockTimeout with an error wrapping
// ErrLocked. A group- or world-accessible file is tightened to 0600.
func Open(path string, opt Options) (*Journal, error) {
	if path == "" {
		return nil, errors.New("journal: empty path")
	}
	if opt.LockTimeout <= 0 {
		opt.LockTimeout = DefaultLockTimeout
	}
	if opt.BootID == nil {
		opt.BootID = ReadBootID
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	created := false
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("journal %s %w: refusing to follow it; point stratum-upgrade at the real file", path, durable.ErrSymlink)
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("journal %s %w (%s)", path, durable.ErrNotRegular, fi.Mode().Type())
	case errors.Is(err, fs.ErrNotExist) && opt.ReadOnly:
		return nil, fmt.Errorf("journal %s does not exist: nothing has been imported or upgraded on this node yet", path)
	case errors.Is(err, fs.ErrNotExist):
		if err := durable.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("journal %s: create directory: %w", path, err)
		}
		created = true
	case err != nil:
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}

	db, err := openBolt(path, opt)
	var ce *CorruptError
	switch {
	case errors.As(err, &ce):
		return nil, err
	case errors.Is(err, berrors.ErrTimeout):
		return nil, &lockedError{path: path}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, &CorruptError{Path: path, Err: &notBoltError{err.Error()}}
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("journal %s %w: refusing to follow it", path, durable.ErrSymlink)
	case err != nil:
		return nil, fmt.Errorf("journal %s: open: %w", path, err)
	}
	if created {
		// bbolt fsyncs the file, not the directory entry that names it.
		if err := durable.SyncDir(filepath.Dir(path)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("journal %s: %w", path, err)
		}
	}
	j := &Journal{db: db, path: path, bootID: opt.BootID, now: opt.Now}
	if err := j.prepare(opt.ReadOnly); err != nil {
		_ = db.Close()
		return nil, err
	}
	if !opt.ReadOnly {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != 0o600 {
			if err := os.Chmod(path, 0o600); err != nil {
				_ = db.Close()
				return nil, fmt.Errorf("journal %s: tighten mode %v to 0600: %w", path, fi.Mode().Perm(), err)
			}
			slog.Warn("journal mode tightened", "path", path, "was", fi.Mode().Perm().String(), "now", "-rw-------")
		}
	}
	return j, nil
}

// openBolt is bolt.Open with the file checked first. bbolt trusts its
// file: a damaged one makes it panic, or fault on a read past the end of a
// truncated file, which Go cannot recover from. So the OpenFile hook opens
// the file, takes bbolt's own flock on it (the same kind and timeout bbolt
// would take; bbolt's flock on the same descriptor then succeeds at once),
// and runs verifyFile under that lock, before bbolt reads a byte or, in
// read-write mode, writes one. A panic or fault inside bolt.Open that the
// check did not foresee becomes a *CorruptError too (the descriptor and
// its lock then leak until the process exits).
func openBolt(path string, opt Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, &CorruptError{Path: path, Err: fmt.Errorf("panic in bbolt: %v", r)}
		}
	}()
	return bolt.Open(path, 0o600, &bolt.Options{
		Timeout:  opt.LockTimeout,
		ReadOnly: opt.ReadOnly,
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag|syscall.O_NOFOLLOW, perm)
			if err != nil {
				return nil, err
			}
			if err := flockTimeout(f, !opt.ReadOnly, opt.LockTimeout); err != nil {
				_ = f.Close()
				return nil, err
			}
			if err := verifyFile(f); err != nil {
				_ = f.Close()
				return nil, &CorruptError{Path: path, Err: err}
			}
			return f, nil
		},
	})
}

// flockTimeout takes a flock on f as bbolt does: exclusive for a writer,
// shared for a reader, retrying every 50 ms, and fails with
// berrors.ErrTimeout after timeout.
func flockTimeout(f *os.File, exclusive bool, timeout time.Duration) error {
	how := syscall.LOCK_SH | syscall.LOCK_NB
	if exclusive {
		how = syscall.LOCK_EX | syscall.LOCK_NB
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return fmt.Errorf("flock: %w", err)
		case time.Now().After(deadline):
			return berrors.ErrTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// prepare checks the schema version and runs pending migrations.
func (j *Journal) prepare(readOnly bool) error {
	var version int
	err := j.view(func(tx *bolt.Tx) error {
		var err error
		version, err = readVersion(tx)
		return err
	})
	var ce *CorruptError
	if errors.As(err, &ce) {
		return err
	}
	if err != nil {
		return fmt.Errorf("journal %s: read schema version: %w", j.path, err)
	}
	switch {
	case version > currentVersion:
		return fmt.Errorf("journal %s has schema version %d, newer than version %d that this stratum-upgrade knows: it was written by a newer stratum-upgrade; use that one (nothing was written)", j.path, version, currentVersion)
	case version == currentVersion:
		j.ready = true
		return nil
	case readOnly:
		return fmt.Errorf("journal %s has schema version %d: %w to version %d, which a read-only open cannot do (nothing was written)", j.path, version, ErrNeedsMigration, currentVersion)
	}
	err = j.update(func(tx *bolt.Tx, now time.Time) error {
		// Re-read inside the write transaction: it is the one that counts.
		v, err := readVersion(tx)
		if err != nil {
			return err
		}
		return migrate(tx, v, now)
	})
	if err != nil {
		return fmt.Errorf("journal %s: migrate from schema version %d to %d (the file is unchanged): %w", j.path, version, currentVersion, err)
	}
	j.ready = true
	if version > 0 || j.hasData() {
		slog.Info("journal migrated", "path", j.path, "from", version, "to", currentVersion)
	}
	return nil
}

// hasData reports whether the file holds a node state (for logging only).
func (j *Journal) hasData() bool {
	_, err := j.NodeState()
	return err == nil
}

// Close closes the file and releases the lock. The Journal is unusable
// after. After a read-write transaction panicked (a *CorruptError) Close
// closes nothing, because bbolt may still hold its write lock and would
// wait for it forever; the file and its flock are released when the
// process exits.
func (j *Journal) Close() error {
	if j.stuck.Load() {
		return fmt.Errorf("journal %s: close: not closed after a panic in a write: %w", j.path, j.broken.Load())
	}
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("journal %s: close: %w", j.path, err)
	}
	return nil
}

// Path is the file the journal was opened from.
func (j *Journal) Path() string { return j.path }

// Commits is the number of bbolt read-write transactions this Journal has
// committed, migrations included. Each commit is the fsyncs bbolt does for
// one commit (two fdatasyncs, plus one more when the file grows).
func (j *Journal) Commits() uint64 { return j.commits.Load() }

// ReadBootID returns this boot's id from /proc/sys/kernel/random/boot_id.
func ReadBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("read boot id: /proc/sys/kernel/random/boot_id is empty")
	}
	return id, nil
}

// SchemaVersion returns the schema version stored in the file.
func (j *Journal) SchemaVersion() (int, error) {
	var v int
	err := j.view(func(tx *bolt.Tx) error {
		var err error
		v, err = readVersion(tx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("journal %s: schema version: %w", j.path, err)
	}
	return v, nil
}

// NodeState returns the persisted node state, decoded with nodestate.Parse.
// Without one it returns an error wrapping ErrNoState.
func (j *Journal) NodeState() (*nodestate.NodeState, error) {
	var b []byte
	err := j.view(func(tx *bolt.Tx) error {
		b = clone(tx.Bucket(bucketState).Get(keyCurrent))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: read node state: %w", j.path, err)
	}
	if b == nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, ErrNoState)
	}
	st, err := nodestate.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("journal %s: state/current: %w", j.path, err)
	}
	return st, nil
}

// PutNodeState validates st and makes it the persisted node state, durably.
// It is refused with an error wrapping ErrTxnOpen while a transaction is
// open: during a transaction the node state changes only by Commit.
func (j *Journal) PutNodeState(st *nodestate.NodeState) error {
	b, err := encodeState(st)
	if err != nil {
		return fmt.Errorf("journal %s: put node state: %w", j.path, err)
	}
	err = j.update(func(tx *bolt.Tx, _ time.Time) error {
		if id := tx.Bucket(bucketOpen).Get(keyOpenTxn); id != nil {
			return fmt.Errorf("%w (%s); it must commit or roll back first", ErrTxnOpen, id)
		}
		return tx.Bucket(bucketState).Put(keyCurrent, b)
	})
	if err != nil {
		return fmt.Errorf("journal %s: put node state: %w", j.path, err)
	}
	return nil
}

func encodeState(st *nodestate.NodeState) ([]byte, error) {
	if st == nil {
		return nil, errors.New("nil node state")
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return st.Marshal()
}

// Begin stores t as a new transaction in phase planned and returns the
// stored copy. The journal assigns ID, Phase, Started and Updated and
// clears Ended, whatever t holds. Kind must be KindUpgrade or
// KindRollbackLast. When a transaction is already open Begin fails with an
// error wrapping ErrTxnOpen and stores nothing.
func (j *Journal) Begin(t Txn) (Txn, error) {
	if t.Kind != KindUpgrade && t.Kind != KindRollbackLast {
		return Txn{}, fmt.Errorf("journal %s: begin: kind %q is neither %q nor %q", j.path, t.Kind, KindUpgrade, KindRollbackLast)
	}
	var out Txn
	err := j.update(func(tx *bolt.Tx, now time.Time) error {
		if id := tx.Bucket(bucketOpen).Get(keyOpenTxn); id != nil {
			return fmt.Errorf("%w (%s); resume or roll it back first", ErrTxnOpen, id)
		}
		txns := tx.Bucket(bucketTxns)
		id, err := newID(txns, now)
		if err != nil {
			return err
		}
		seq, err := txns.NextSequence()
		if err != nil {
			return err
		}
		t.ID, t.Phase, t.Started, t.Updated, t.Ended = id, PhasePlanned, now, now, time.Time{}
		if out, err = putTxn(tx, &storedTxn{Txn: t, Seq: seq}); err != nil {
			return err
		}
		if _, err := tx.Bucket(bucketRecords).CreateBucket([]byte(id)); err != nil {
			return fmt.Errorf("create records/%s: %w", id, err)
		}
		return tx.Bucket(bucketOpen).Put(keyOpenTxn, []byte(id))
	})
	if err != nil {
		return Txn{}, fmt.Errorf("journal %s: begin %s: %w", j.path, t.Kind, err)
	}
	return out, nil
}

// newID returns an unused id: the UTC second of now and 4 random hex digits.
func newID(txns *bolt.Bucket, now time.Time) (string, error) {
	for range 32 {
		var r [2]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("transaction id: %w", err)
		}
		id := now.Format("20060102T150405Z") + "-" + hex.EncodeToString(r[:])
		if txns.Get([]byte(id)) == nil {
			return id, nil
		}
	}
	return "", errors.New("transaction id: 32 random ids in the same second were all taken")
}

// OpenTxn returns the open transaction, or nil and no error when none is open.
func (j *Journal) OpenTxn() (*Txn, error) {
	var out *Txn
	err := j.view(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketOpen).Get(keyOpenTxn)
		if id == nil {
			return nil
		}
		st, err := getTxn(tx, string(id))
		if err != nil {
			return fmt.Errorf("open/txn names %s: %w", id, err)
		}
		if !st.Phase.Open() {
			return fmt.Errorf("open/txn names %s, whose phase %q is closed: the file is inconsistent", id, st.Phase)
		}
		out = &st.Txn
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: open transaction: %w", j.path, err)
	}
	return out, nil
}

// Txn returns the transaction id, or an error wrapping ErrNoTxn.
func (j *Journal) Txn(id string) (*Txn, error) {
	var out *Txn
	err := j.view(func(tx *bolt.Tx) error {
		st, err := getTxn(tx, id)
		if err != nil {
			return err
		}
		out = &st.Txn
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: transaction %s: %w", j.path, id, err)
	}
	return out, nil
}

// Append appends recs to the open transaction id and sets its phase, in one
// bbolt transaction that is committed (fsynced) when Append returns nil. It
// returns the stored records with Seq, Time and BootID assigned; a record
// with an empty Phase gets phase. phase must be an open phase (a
// transaction is closed only by Commit or Finish). Append to a closed
// transaction fails with an error wrapping ErrTxnClosed; on any error
// nothing is stored.
func (j *Journal) Append(id string, phase Phase, recs ...Record) ([]Record, error) {
	var out []Record
	err := j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		if err := checkPhase(phase); err != nil {
			return err
		}
		if !phase.Open() {
			return fmt.Errorf("phase %q is terminal: use Commit or Finish", phase)
		}
		st, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		st.Phase, st.Updated = phase, now
		if _, err := putTxn(tx, st); err != nil {
			return err
		}
		out, err = appendRecords(tx, id, phase, now, bootID, recs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: append to %s (%s): %w", j.path, id, phase, err)
	}
	return out, nil
}

// Update applies fn to a copy of the open transaction id and stores the
// result together with recs, in one bbolt transaction committed (fsynced)
// when Update returns nil. fn may change any field but ID, Kind and the
// times, which the journal owns; the phase it leaves must be an open one
// (Commit and Finish close a transaction). Records with an empty Phase get
// the resulting phase. When fn returns an error, or the transaction is
// closed (ErrTxnClosed), nothing is stored.
func (j *Journal) Update(id string, fn func(*Txn) error, recs ...Record) error {
	err := j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		st, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		t := st.Txn // fn gets a copy; st came from JSON and shares nothing
		if err := fn(&t); err != nil {
			return err
		}
		switch {
		case t.ID != st.ID:
			return fmt.Errorf("the update changed the id to %q", t.ID)
		case t.Kind != st.Kind:
			return fmt.Errorf("the update changed the kind from %q to %q", st.Kind, t.Kind)
		}
		if err := checkPhase(t.Phase); err != nil {
			return err
		}
		if !t.Phase.Open() {
			return fmt.Errorf("phase %q is terminal: use Commit or Finish", t.Phase)
		}
		t.Started, t.Updated, t.Ended = st.Started, now, time.Time{}
		if _, err := putTxn(tx, &storedTxn{Txn: t, Seq: st.Seq}); err != nil {
			return err
		}
		_, err = appendRecords(tx, id, t.Phase, now, bootID, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal %s: update %s: %w", j.path, id, err)
	}
	return nil
}

// Records returns the records of transaction id in Seq order.
func (j *Journal) Records(id string) ([]Record, error) {
	var out []Record
	err := j.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords).Bucket([]byte(id))
		if b == nil {
			return ErrNoTxn
		}
		return b.ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %x: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: records of %s: %w", j.path, id, err)
	}
	return out, nil
}

// Commit closes the open transaction id as committed and makes st the
// persisted node state, in one bbolt transaction together with recs: after
// a crash either all of it is stored or none. The transaction's To is set
// to st's YAML and Ended to now. st must validate.
func (j *Journal) Commit(id string, st *nodestate.NodeState, recs ...Record) error {
	b, err := encodeState(st)
	if err != nil {
		return fmt.Errorf("journal %s: commit %s: node state: %w", j.path, id, err)
	}
	err = j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		t, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		t.Phase, t.Updated, t.Ended, t.To = PhaseCommitted, now, now, b
		if _, err := putTxn(tx, t); err != nil {
			return err
		}
		if err := tx.Bucket(bucketState).Put(keyCurrent, b); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOpen).Delete(keyOpenTxn); err != nil {
			return err
		}
		_, err = appendRecords(tx, id, PhaseCommitted, now, bootID, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal %s: commit %s: %w", j.path, id, err)
	}
	return nil
}

// Finish closes the open transaction id as rolled-back or rollback-failed,
// in one bbolt transaction together with recs. A non-empty reason replaces
// Reason and a non-nil detail replaces Detail. The node state is not
// changed: a transaction that did not commit never changed it.
func (j *Journal) Finish(id string, phase Phase, reason string, detail []byte, recs ...Record) error {
	if phase != PhaseRolledBack && phase != PhaseRollbackFailed {
		return fmt.Errorf("journal %s: finish %s: phase %q is not %q or %q (use Commit to commit)", j.path, id, phase, PhaseRolledBack, PhaseRollbackFailed)
	}
	err := j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		t, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		t.Phase, t.Updated, t.Ended = phase, now, now
		if reason != "" {
			t.Reason = reason
		}
		if detail != nil {
			t.Detail = clone(detail)
		}
		if _, err := putTxn(tx, t); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOpen).Delete(keyOpenTxn); err != nil {
			return err
		}
		_, err = appendRecords(tx, id, phase, now, bootID, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal %s: finish %s as %s: %w", j.path, id, phase, err)
	}
	return nil
}

// History returns up to limit transactions, newest (last begun) first;
// limit <= 0 means all.
func (j *Journal) History(limit int) ([]Txn, error) {
	var all []storedTxn
	err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTxns).ForEach(func(k, v []byte) error {
			var st storedTxn
			if err := json.Unmarshal(v, &st); err != nil {
				return fmt.Errorf("txns/%s: %w", k, err)
			}
			all = append(all, st)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: history: %w", j.path, err)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].Seq > all[b].Seq })
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	out := make([]Txn, len(all))
	for i := range all {
		out[i] = all[i].Txn
	}
	return out, nil
}

// view runs fn in a read-only bbolt transaction. fn must copy every byte
// slice it keeps: they point into the memory map, valid only until return.
func (j *Journal) view(fn func(tx *bolt.Tx) error) error {
	return j.run(false, fn)
}

// run runs fn in a bbolt transaction, read-write when writable, and
// commits it when fn returns nil and the transaction is writable. It is
// the one place the journal runs transactions, so the one place that turns
// a panic of bbolt (or a memory fault reading its map) into a
// *CorruptError: the transaction is not committed, so nothing was written,
// and the Journal is marked broken.
func (j *Journal) run(writable bool, fn func(tx *bolt.Tx) error) (err error) {
	if ce := j.broken.Load(); ce != nil {
		return ce
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			ce := &CorruptError{Path: j.path, Err: fmt.Errorf("panic in a transaction: %v", r)}
			j.broken.CompareAndSwap(nil, ce)
			if writable {
				j.stuck.Store(true)
			}
			err = ce
		}
	}()
	tx, err := j.db.Begin(writable)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := j.checkBuckets(tx); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if !writable {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	j.commits.Add(1)
	return nil
}

// checkBuckets makes sure, once the file is migrated, that every bucket
// exists, so that call sites can use tx.Bucket without a nil check.
func (j *Journal) checkBuckets(tx *bolt.Tx) error {
	if !j.ready {
		return nil
	}
	for _, b := range [][]byte{bucketMeta, bucketState, bucketTxns, bucketRecords, bucketOpen} {
		if tx.Bucket(b) == nil {
			return &CorruptError{Path: j.path, Err: fmt.Errorf("bucket %s is missing", b)}
		}
	}
	return nil
}

// update runs fn in a read-write bbolt transaction and commits it; the
// commit fsyncs. On any error nothing is stored.
func (j *Journal) update(fn func(tx *bolt.Tx, now time.Time) error) error {
	now := j.now().UTC()
	return j.run(true, func(tx *bolt.Tx) error { return fn(tx, now) })
}

// write is update for a change to transaction id carrying recs: it reads
// the boot id first when there are records, and checks the file's buckets.
func (j *Journal) write(id string, recs []Record, fn func(tx *bolt.Tx, now time.Time, bootID string) error) error {
	var bootID string
	if len(recs) > 0 {
		var err error
		if bootID, err = j.bootID(); err != nil {
			return err
		}
		if bootID == "" {
			return errors.New("boot id is empty")
		}
	}
	return j.update(func(tx *bolt.Tx, now time.Time) error {
		if tx.Bucket(bucketRecords).Bucket([]byte(id)) == nil {
			if _, err := getTxn(tx, id); err != nil {
				return err
			}
			return fmt.Errorf("records/%s is missing: the file is damaged", id)
		}
		return fn(tx, now, bootID)
	})
}

// getTxn decodes txns/<id>; the result shares no memory with bbolt.
func getTxn(tx *bolt.Tx, id string) (*storedTxn, error) {
	v := tx.Bucket(bucketTxns).Get([]byte(id))
	if v == nil {
		return nil, ErrNoTxn
	}
	var st storedTxn
	if err := json.Unmarshal(v, &st); err != nil {
		return nil, fmt.Errorf("txns/%s: %w", id, err)
	}
	return &st, nil
}

// getOpenTxn is getTxn for a transaction that must be open and named by
// open/txn.
func getOpenTxn(tx *bolt.Tx, id string) (*storedTxn, error) {
	st, err := getTxn(tx, id)
	if err != nil {
		return nil, err
	}
	if !st.Phase.Open() {
		return nil, fmt.Errorf("%w: phase %q", ErrTxnClosed, st.Phase)
	}
	if open := tx.Bucket(bucketOpen).Get(keyOpenTxn); string(open) != id {
		return nil, fmt.Errorf("phase %q is open but open/txn is %q: the file is inconsistent", st.Phase, open)
	}
	return st, nil
}

// putTxn stores st and returns the Txn decoded back from the stored bytes,
// so that the caller's value shares nothing with what it gets.
func putTxn(tx *bolt.Tx, st *storedTxn) (Txn, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return Txn{}, fmt.Errorf("encode txn %s: %w", st.ID, err)
	}
	if err := tx.Bucket(bucketTxns).Put([]byte(st.ID), b); err != nil {
		return Txn{}, fmt.Errorf("store txns/%s: %w", st.ID, err)
	}
	var out storedTxn
	if err := json.Unmarshal(b, &out); err != nil {
		return Txn{}, fmt.Errorf("decode txn %s: %w", st.ID, err)
	}
	return out.Txn, nil
}

// appendRecords stores recs under records/<id> with fresh sequence
// numbers, now and bootID, and returns them decoded back from the stored
// bytes.
func appendRecords(tx *bolt.Tx, id string, phase Phase, now time.Time, bootID string, recs []Record) ([]Record, error) {
	b := tx.Bucket(bucketRecords).Bucket([]byte(id))
	out := make([]Record, 0, len(recs))
	for i, r := range recs {
		if r.Phase == "" {
			r.Phase = phase
		}
		if err := checkPhase(r.Phase); err != nil {
			return nil, fmt.Errorf("record %d (%s): %w", i, r.Step, err)
		}
		if !r.Step.Known() {
			return nil, fmt.Errorf("record %d: unknown step %q (known: %v)", i, r.Step, Steps)
		}
		seq, err := b.NextSequence()
		if err != nil {
			return nil, err
		}
		r.Seq, r.Time, r.BootID = seq, now, bootID
		v, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode record %d (%s): %w", i, r.Step, err)
		}
		if err := b.Put(u64(seq), v); err != nil {
			return nil, fmt.Errorf("store records/%s/%d: %w", id, seq, err)
		}
		var c Record
		if err := json.Unmarshal(v, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
