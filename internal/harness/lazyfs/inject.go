package lazyfs

import (
	"fmt"
	"path"
	"sync/atomic"
	"syscall"
)

// Op names a filesystem operation that a Rule can fail.
type Op string

const (
	OpOpen     Op = "open"     // open of an existing file (not directories)
	OpCreate   Op = "create"   // creation of a file (open O_CREAT of a new name, mknod)
	OpRead     Op = "read"     // READ request (also page-cache fills and mmap faults)
	OpWrite    Op = "write"    // WRITE request, and fallocate
	OpTruncate Op = "truncate" // truncate/ftruncate/O_TRUNC done as a size change
	OpFsync    Op = "fsync"    // fsync/fdatasync of a file or directory
	OpMkdir    Op = "mkdir"
	OpRmdir    Op = "rmdir"
	OpUnlink   Op = "unlink"
	OpRename   Op = "rename" // matches if the source or the target path matches
	OpLink     Op = "link"   // matches the new name
	OpSymlink  Op = "symlink"

	// OpMutate matches every operation that changes the file system:
	// write, truncate, fsync, create, mkdir, rmdir, unlink, rename, link
	// and symlink (not open or read). A rule {Op: OpMutate, After: n,
	// Errno: EIO} is a power cut after the n-th change: nothing later
	// reaches the disk, as a device that went away answers EIO. Its Seen
	// count on a run without a cut is how many cut points a run has.
	OpMutate Op = "mutate"
)

// mutates reports whether op changes the file system.
func (op Op) mutates() bool {
	switch op {
	case OpOpen, OpRead, OpMutate:
		return false
	}
	return true
}

// Rule describes failures to inject. An operation matches a rule if its Op
// is the rule's and its path (slash-separated, relative to the mount root,
// no leading slash; "" for the root) matches the path.Match pattern Path
// ("" matches every path). Of the matching operations, the first After
// pass; the following Times fail with Errno (all of them if Times is 0). A
// failed operation changes nothing: it is refused before it reaches the
// backing directory or the model.
//
// The kernel decides how system calls map to operations: a write(2) of
// more than 128 KiB is several WRITE requests, open(O_TRUNC) of an existing
// file is an open plus a truncate, and close(2) does not fsync.
type Rule struct {
	Op    Op
	Path  string
	Errno syscall.Errno // e.g. syscall.ENOSPC, syscall.EIO
	After int
	Times int
}

// validate reports a malformed rule.
func (r Rule) validate() error {
	if _, err := path.Match(r.Path, ""); err != nil {
		return fmt.Errorf("lazyfs: bad pattern %q: %v", r.Path, err)
	}
	if r.Errno == 0 {
		return fmt.Errorf("lazyfs: rule %s %q has no Errno", r.Op, r.Path)
	}
	return nil
}

// injection is an installed Rule and its counters, in the server.
type injection struct {
	Rule
	id      int
	cleared bool // by clearRules: kept only for its counts
	seen    atomic.Int64
	fired   atomic.Int64
}

// addRule installs r and returns its id.
func (f *server) addRule(r Rule) (int, error) {
	if err := r.validate(); err != nil {
		return 0, err
	}
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.nextID++
	f.rules = append(f.rules, &injection{Rule: r, id: f.nextID})
	return f.nextID, nil
}

// counts returns how often rule id matched and fired.
func (f *server) counts(id int) (seen, fired int64) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	for _, in := range f.rules {
		if in.id == id {
			return in.seen.Load(), in.fired.Load()
		}
	}
	return 0, 0
}

// clearRules retires all rules; their counts stay readable.
func (f *server) clearRules() {
	f.rmu.Lock()
	for _, in := range f.rules {
		in.cleared = true
	}
	f.rmu.Unlock()
}

// inject returns the errno to fail op on any of paths with, or 0. Every
// matching rule counts the operation as seen; the first that fires wins.
func (f *server) inject(op Op, paths ...string) syscall.Errno {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	var errno syscall.Errno
	for _, in := range f.rules {
		if in.cleared || !(in.Op == op || in.Op == OpMutate && op.mutates()) || !in.matches(paths) {
			continue
		}
		n := in.seen.Add(1)
		if errno != 0 || n <= int64(in.After) {
			continue
		}
		if in.Times > 0 && in.fired.Load() >= int64(in.Times) {
			continue
		}
		in.fired.Add(1)
		errno = in.Errno
	}
	return errno
}

func (in *injection) matches(paths []string) bool {
	for _, p := range paths {
		if ok, _ := path.Match(in.Path, p); ok || in.Path == "" {
			return true
		}
	}
	return false
}
