package lazyfs

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// dirent is one directory entry as the model sees it: the name's inode and
// its file type bits.
type dirent struct {
	ino  uint64
	mode uint32
}

func (d dirent) isDir() bool { return d.mode&syscall.S_IFMT == syscall.S_IFDIR }

// readEntries lists dir's entries with their inode numbers.
func readEntries(dir string) (map[string]dirent, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	ents := make(map[string]dirent, len(names))
	for _, name := range names {
		st, err := lstat(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		ents[name] = dirent{ino: st.Ino, mode: st.Mode}
	}
	return ents, nil
}

func lstat(path string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return &st, nil
}

func isDirMode(mode uint32) bool { return mode&syscall.S_IFMT == syscall.S_IFDIR }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// touchDir makes sure the model holds dir's durable entries before an entry
// of dir changes: if dir is clean (unchanged since its last fsync or since
// mount) its current entries are the durable ones, so it snapshots them.
// The caller holds f.mu.
func (f *server) touchDir(dir string) syscall.Errno {
	st, err := lstat(dir)
	if err != nil {
		return errnoOf(err)
	}
	if _, ok := f.dirs[st.Ino]; ok {
		return 0
	}
	ents, err := readEntries(dir)
	if err != nil {
		return errnoOf(err)
	}
	f.dirs[st.Ino] = ents
	return 0
}

// stashName is where an unlinked inode is kept alive until the next power
// loss, so that a directory whose removal of it is not yet durable can still
// bring it back, and so that its inode number is never reused meanwhile.
func (f *server) stashName(ino uint64) string {
	return filepath.Join(f.stash, strconv.FormatUint(ino, 10))
}

// stashLink keeps the non-directory inode at path alive in the stash. The
// caller holds f.mu.
func (f *server) stashLink(path string, ino uint64) syscall.Errno {
	err := os.Link(path, f.stashName(ino))
	if err != nil && !os.IsExist(err) {
		return errnoOf(err)
	}
	return 0
}

// stashDir moves the empty directory at path into the stash. The caller
// holds f.mu.
func (f *server) stashDir(path string, ino uint64) syscall.Errno {
	return errnoOf(os.Rename(path, f.stashName(ino)))
}

// isEmptyDir reports whether dir has no entries.
func isEmptyDir(dir string) (bool, syscall.Errno) {
	d, err := os.Open(dir)
	if err != nil {
		return false, errnoOf(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, errnoOf(err)
	}
	return len(names) == 0, 0
}

// errnoOf extracts the errno of an error; EIO if it carries none.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
