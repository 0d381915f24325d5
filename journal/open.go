// Options, Open (file checks, lock, migration), Close and ReadBootID.

package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/ciq/stratum-upgrade/durable"
)

// DefaultLockTimeout is how long Open waits for another process to release
// the journal when Options.LockTimeout is zero.
const DefaultLockTimeout = 2 * time.Second

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

// Open opens the journal at path, creating it (mode 0600, parent directory
// 0700) when it does not exist and Options.ReadOnly is false, and migrates
// it to the current schema version in one bbolt transaction. Only a file
// that does not exist is created: an existing 0-byte file is refused with
// an *EmptyError (errors.Is ErrEmpty), because bbolt would make it a new,
// empty journal and the node would silently lose what it held.
//
// Before bbolt reads the file, Open checks its page structure under the
// file's lock (verifyFile: about 20 ms for a journal of 1000 transactions,
// 33 MB): a file that is not a bbolt database or is damaged (garbage in a
// page, truncated) is refused with a *CorruptError (errors.Is ErrCorrupt)
// instead of making bbolt panic or fault.
//
// Open refuses, writing nothing: a symbolic link at path; a path that is
// not a regular file; a 0-byte file it did not create; a damaged file or one that is not a bbolt database; a file whose
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
		return nil, fmt.Errorf("journal %s %w: it is %s; move it aside or use another state directory", path, durable.ErrNotRegular, fileType(fi.Mode()))
	case errors.Is(err, syscall.ENOTDIR):
		return nil, &osError{fmt.Sprintf("journal %s: %s", path, durable.Reason(filepath.Dir(path), err)), err}
	case errors.Is(err, fs.ErrNotExist) && opt.ReadOnly:
		return nil, fmt.Errorf("journal %s does not exist: nothing has been imported or upgraded on this node yet", path)
	case errors.Is(err, fs.ErrNotExist):
		if err := durable.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, &osError{fmt.Sprintf("journal %s: cannot create its directory: %s", path, durable.Reason(filepath.Dir(path), err)), err}
		}
		created = true
	case err != nil:
		return nil, &osError{fmt.Sprintf("journal %s: %s", path, durable.Reason(path, err)), err}
	}

	db, err := openBolt(path, opt, created)
	var ce *CorruptError
	var ee *EmptyError
	switch {
	case errors.As(err, &ce), errors.As(err, &ee):
		return nil, err
	case errors.Is(err, berrors.ErrTimeout):
		return nil, &lockedError{path: path}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, &CorruptError{Path: path, Err: &notBoltError{err.Error()}}
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("journal %s %w: refusing to follow it", path, durable.ErrSymlink)
	case err != nil:
		how := "for writing"
		if opt.ReadOnly {
			how = "for reading"
		}
		return nil, &osError{fmt.Sprintf("journal %s: cannot open it %s: %s", path, how, durable.Reason(path, err)), err}
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

// osError is an OS error in the operator's words: the message names the
// path once and says what is wrong ("read-only file system", "/x is a file,
// not a directory"); it wraps the original error (errors.Is and errors.As
// still see the *fs.PathError and its errno).
type osError struct {
	msg string
	err error
}

func (e *osError) Error() string { return e.msg }
func (e *osError) Unwrap() error { return e.err }

// fileType names the type of a file that is not a regular one.
func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// openBolt is bolt.Open with the file checked first. bbolt trusts its
// file: a damaged one makes it panic, or fault on a read past the end of a
// truncated file, which Go cannot recover from. So the OpenFile hook opens
// the file, takes bbolt's own flock on it (the same kind and timeout bbolt
// would take; bbolt's flock on the same descriptor then succeeds at once),
// and runs verifyFile under that lock, before bbolt reads a byte or, in
// read-write mode, writes one. A panic or fault inside bolt.Open that the
// check did not foresee becomes a *CorruptError too (the descriptor and
// its lock then leak until the process exits). An empty file is refused
// there too, under the lock (a writer creating the journal holds it until
// the first pages are written), unless this Open created it (created).
func openBolt(path string, opt Options, created bool) (db *bolt.DB, err error) {
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
			if fi, err := f.Stat(); err == nil && fi.Size() == 0 && !created {
				_ = f.Close()
				return nil, &EmptyError{Path: path}
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
