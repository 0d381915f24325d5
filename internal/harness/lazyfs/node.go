package lazyfs

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose namespace changes keep the durable entries
// of the directories they touch, and whose unlinked inodes go to the stash.
type node struct {
	fs.LoopbackNode
	lfs *server
}

// rel is the node's path relative to the mount root ("" for the root).
func (n *node) rel() string { return n.Path(n.Root()) }

// backing is the node's path in the backing directory.
func (n *node) backing() string { return filepath.Join(n.RootData.Path, n.rel()) }

func (n *node) childRel(name string) string { return filepath.Join(n.rel(), name) }

func (n *node) child(name string) string { return filepath.Join(n.backing(), name) }

var (
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	l := n.lfs
	if e := l.inject(OpCreate, n.childRel(name)); e != 0 {
		return nil, nil, 0, e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.touchDir(n.backing()); e != 0 {
		return nil, nil, 0, e
	}
	p := n.child(name)
	if flags&syscall.O_TRUNC != 0 {
		if st, err := lstat(p); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			if e := l.beforeTruncate(st.Ino, pathReader(p), st.Size, 0); e != 0 {
				return nil, nil, 0, e
			}
		}
	}
	ch, fh, fl, e := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	h, e := l.wrapFile(ch, fh)
	return ch, h, fl, e
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	l := n.lfs
	if e := l.inject(OpOpen, n.rel()); e != 0 {
		return nil, 0, e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if flags&syscall.O_TRUNC != 0 {
		p := n.backing()
		if st, err := lstat(p); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			if e := l.beforeTruncate(st.Ino, pathReader(p), st.Size, 0); e != 0 {
				return nil, 0, e
			}
		}
	}
	fh, fl, e := n.LoopbackNode.Open(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	h, e := l.wrapFile(n.EmbeddedInode(), fh)
	return h, fl, e
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	l := n.lfs
	if e := l.inject(OpMkdir, n.childRel(name)); e != 0 {
		return nil, e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.touchDir(n.backing()); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	l := n.lfs
	if e := l.inject(OpCreate, n.childRel(name)); e != 0 {
		return nil, e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.touchDir(n.backing()); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	l := n.lfs
	if e := l.inject(OpSymlink, n.childRel(name)); e != 0 {
		return nil, e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.touchDir(n.backing()); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Symlink(ctx, target, name, out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	l := n.lfs
	if e := l.inject(OpLink, n.childRel(name)); e != 0 {
		return nil, e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.touchDir(n.backing()); e != 0 {
		return nil, e
	}
	return n.LoopbackNode.Link(ctx, target, name, out)
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	l := n.lfs
	if e := l.inject(OpUnlink, n.childRel(name)); e != 0 {
		return e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := n.child(name)
	st, err := lstat(p)
	if err != nil {
		return errnoOf(err)
	}
	if isDirMode(st.Mode) {
		return syscall.EISDIR
	}
	if e := l.touchDir(n.backing()); e != 0 {
		return e
	}
	if e := l.stashLink(p, st.Ino); e != 0 {
		return e
	}
	return errnoOf(syscall.Unlink(p))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	l := n.lfs
	if e := l.inject(OpRmdir, n.childRel(name)); e != 0 {
		return e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := n.child(name)
	st, err := lstat(p)
	if err != nil {
		return errnoOf(err)
	}
	if !isDirMode(st.Mode) {
		return syscall.ENOTDIR
	}
	if empty, e := isEmptyDir(p); e != 0 || !empty {
		if e == 0 {
			e = syscall.ENOTEMPTY
		}
		return e
	}
	if e := l.touchDir(n.backing()); e != 0 {
		return e
	}
	return l.stashDir(p, st.Ino)
}

// Rename keeps the durable entries of both directories, and stashes a
// replaced target so that an undurable replace can be rolled back.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	l := n.lfs
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if e := l.inject(OpRename, n.childRel(name), np.childRel(newName)); e != 0 {
		return e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	src, dst := n.child(name), np.child(newName)
	sst, err := lstat(src)
	if err != nil {
		return errnoOf(err)
	}
	if e := l.touchDir(n.backing()); e != 0 {
		return e
	}
	if e := l.touchDir(np.backing()); e != 0 {
		return e
	}
	var movedDir *syscall.Stat_t // target dir moved to the stash, to restore on failure
	if tst, err := lstat(dst); err == nil && flags == 0 && tst.Ino != sst.Ino {
		switch {
		case isDirMode(tst.Mode) && !isDirMode(sst.Mode):
			return syscall.EISDIR
		case !isDirMode(tst.Mode) && isDirMode(sst.Mode):
			return syscall.ENOTDIR
		case isDirMode(tst.Mode):
			if empty, e := isEmptyDir(dst); e != 0 || !empty {
				if e == 0 {
					e = syscall.ENOTEMPTY
				}
				return e
			}
			if e := l.stashDir(dst, tst.Ino); e != 0 {
				return e
			}
			movedDir = tst
		default:
			if e := l.stashLink(dst, tst.Ino); e != 0 {
				return e
			}
		}
	}
	e := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
	if e != 0 && movedDir != nil {
		syscall.Rename(l.stashName(movedDir.Ino), dst)
	}
	return e
}

// Setattr records a shrinking truncate in the undo log before doing it.
// Mode, owner and time changes pass through and are not rolled back.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	l := n.lfs
	sz, ok := in.GetSize()
	if !ok {
		return n.LoopbackNode.Setattr(ctx, unwrap(f), in, out)
	}
	if e := l.inject(OpTruncate, n.rel()); e != 0 {
		return e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	read := pathReader(n.backing())
	var st syscall.Stat_t
	if h, ok := f.(*fileHandle); ok {
		read = fdReader(h.fd)
		if err := syscall.Fstat(h.fd, &st); err != nil {
			return errnoOf(err)
		}
	} else if err := syscall.Lstat(n.backing(), &st); err != nil {
		return errnoOf(err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		if e := l.beforeTruncate(st.Ino, read, st.Size, int64(sz)); e != 0 {
			return e
		}
	}
	return n.LoopbackNode.Setattr(ctx, unwrap(f), in, out)
}

// Fsync makes the node durable: a file's data, or a directory's entries.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	var ino uint64
	if h, ok := f.(*fileHandle); ok {
		ino = h.ino
	} else {
		st, err := lstat(n.backing())
		if err != nil {
			return errnoOf(err)
		}
		ino = st.Ino
	}
	return n.lfs.fsync(n.rel(), ino, isDirMode(n.StableAttr().Mode))
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p := n.backing()
	st, err := lstat(p)
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	ds, e := fs.NewLoopbackDirStream(p)
	if e != 0 {
		return nil, 0, e
	}
	return &dirHandle{ds: ds, n: n, ino: st.Ino}, 0, 0
}

// CopyFileRange is refused with ENOSYS so that the kernel falls back to
// reads and writes, which the undo log sees.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// fsync marks the inode durable. The caller does not hold f.mu.
func (f *server) fsync(rel string, ino uint64, dir bool) syscall.Errno {
	if e := f.inject(OpFsync, rel); e != 0 {
		return e
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if dir {
		f.stats.DirFsyncs++
		delete(f.dirs, ino)
		return 0
	}
	f.stats.Fsyncs++
	delete(f.files, ino)
	if f.last != nil && f.last.ino == ino {
		f.last = nil
	}
	return 0
}
