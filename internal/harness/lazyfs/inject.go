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
)

// Rule describes failures to inject. An operation matches a rule if its Op
// is the rule's and its path (slash-separated, relative to the mount root,
// no leading slash) matches Path and Match. Of the matching operations, the
// first After pass; the following Times fail with Errno (all of them if
// Times is 0). A failed operation changes nothing: it is refused before it
// reaches the backing directory or the model.
//
// The kernel decides how system calls map to operations: a write(2) of
// more than 128 KiB is several WRITE requests, open(O_TRUNC) of an existing
// file is an open plus a truncate, and close(2) does not fsync.
type Rule struct {
	Op    Op
	Path  string                // path.Match pattern; "" matches every path
	Match func(rel string) bool // optional further predicate
	Errno syscall.Errno         // e.g. syscall.ENOSPC, syscall.EIO
	After int
	Times int
}

// Injection is an installed Rule and its counters.
type Injection struct {
	Rule
	seen  atomic.Int64
	fired atomic.Int64
}

// Seen returns how many operations matched the rule, fired or not.
func (i *Injection) Seen() int64 { return i.seen.Load() }

// Fired returns how many operations the rule failed.
func (i *Injection) Fired() int64 { return i.fired.Load() }

func (i *Injection) String() string {
	return fmt.Sprintf("%s %q -> %v (seen %d, fired %d)", i.Op, i.Path, i.Errno, i.Seen(), i.Fired())
}

// Inject installs r and returns it with its counters. Rules are checked in
// the order they were installed; the first that fires decides the errno.
// Rules survive PowerLoss. It panics on a malformed Path or a zero Errno.
func (f *FS) Inject(r Rule) *Injection {
	if _, err := path.Match(r.Path, ""); err != nil {
		panic(fmt.Sprintf("lazyfs: Inject: bad pattern %q: %v", r.Path, err))
	}
	if r.Errno == 0 {
		panic("lazyfs: Inject: zero Errno")
	}
	in := &Injection{Rule: r}
	f.rmu.Lock()
	f.rules = append(f.rules, in)
	f.rmu.Unlock()
	return in
}

// Clear removes all rules. Injections already returned keep their counts.
func (f *FS) Clear() {
	f.rmu.Lock()
	f.rules = nil
	f.rmu.Unlock()
}

// inject returns the errno to fail op on any of paths with, or 0.
func (f *FS) inject(op Op, paths ...string) syscall.Errno {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	var errno syscall.Errno
	for _, in := range f.rules {
		if in.Op != op || !in.matches(paths) {
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

func (in *Injection) matches(paths []string) bool {
	for _, p := range paths {
		if in.Path != "" {
			if ok, _ := path.Match(in.Path, p); !ok {
				continue
			}
		}
		if in.Match != nil && !in.Match(p) {
			continue
		}
		return true
	}
	return false
}
