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
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DefaultPath is where the journal lives on a node.
const DefaultPath = "/var/lib/stratum/stratum.db"

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
	// ErrEmpty: Open found a 0-byte file it did not create: no journal
	// was ever written to it, or its data was lost. Returned errors are an
	// *EmptyError. Nothing was written to the file.
	ErrEmpty = errors.New("is empty")
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

// EmptyError is the error of an Open that found a 0-byte file it did not
// create. The file is left as it is: initialising it would replace a lost
// journal by a new, empty one, and the node state, the history and an open
// transaction would be forgotten without a word (errors.Is ErrEmpty).
type EmptyError struct{ Path string }

func (e *EmptyError) Error() string {
	return fmt.Sprintf("journal %s is empty: 0 bytes, no journal was ever written to it (its creation was cut short, or a copy or a restore lost its data); nothing was written to it", e.Path)
}

// Unwrap returns ErrEmpty.
func (e *EmptyError) Unwrap() error { return ErrEmpty }

// lockedError is the error of an Open that timed out on the flock.
type lockedError struct{ path string }

func (e *lockedError) Error() string {
	return fmt.Sprintf("journal %s is locked: another stratum-upgrade is running", e.path)
}

func (e *lockedError) Unwrap() error { return ErrLocked }

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

// Path is the file the journal was opened from.
func (j *Journal) Path() string { return j.path }

// Commits is the number of bbolt read-write transactions this Journal has
// committed, migrations included. Each commit is the fsyncs bbolt does for
// one commit (two fdatasyncs, plus one more when the file grows).
func (j *Journal) Commits() uint64 { return j.commits.Load() }
