package lazyfs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// fileHandle wraps a loopback file so that writes, truncates, fallocates
// and fsyncs go through the model. It deliberately does not offer FUSE
// passthrough or ioctls, which would bypass it.
type fileHandle struct {
	lf  *fs.LoopbackFile
	n   *node
	fd  int    // the backing fd, owned by lf
	ino uint64 // backing inode number
}

var (
	_ fs.FileReader    = (*fileHandle)(nil)
	_ fs.FileWriter    = (*fileHandle)(nil)
	_ fs.FileWritever  = (*fileHandle)(nil)
	_ fs.FileReleaser  = (*fileHandle)(nil)
	_ fs.FileFlusher   = (*fileHandle)(nil)
	_ fs.FileFsyncer   = (*fileHandle)(nil)
	_ fs.FileGetattrer = (*fileHandle)(nil)
	_ fs.FileSetattrer = (*fileHandle)(nil)
	_ fs.FileLseeker   = (*fileHandle)(nil)
	_ fs.FileAllocater = (*fileHandle)(nil)
)

// wrapFile wraps the loopback handle fh of inode in. The caller holds f.mu.
func (f *server) wrapFile(in *fs.Inode, fh fs.FileHandle) (*fileHandle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd() // only to learn the fd; never handed to the kernel
	if !ok {
		lf.Release(context.Background())
		return nil, syscall.EBADF
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		lf.Release(context.Background())
		return nil, errnoOf(err)
	}
	n, _ := in.Operations().(*node)
	h := &fileHandle{lf: lf, n: n, fd: fd, ino: st.Ino}
	rel := "?"
	if n != nil {
		rel = n.rel()
	}
	f.open[h] = rel
	return h, 0
}

func unwrap(f fs.FileHandle) fs.FileHandle {
	if h, ok := f.(*fileHandle); ok {
		return h.lf
	}
	return f
}

func (h *fileHandle) rel() string {
	if h.n == nil {
		return ""
	}
	return h.n.rel()
}

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if e := h.n.lfs.inject(OpRead, h.rel()); e != 0 {
		return nil, e
	}
	return h.lf.Read(ctx, dest, off)
}

// Write saves the durable bytes it is about to overwrite, then writes. An
// injected error writes nothing.
func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	l := h.n.lfs
	if e := l.inject(OpWrite, h.rel()); e != 0 {
		return 0, e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, e := l.recFor(h.ino, h.fd)
	if e != 0 {
		return 0, e
	}
	if _, err := rec.save(fdReader(h.fd), off, off+int64(len(data))); err != nil {
		return 0, errnoOf(err)
	}
	n, e := h.lf.Write(ctx, data, off)
	l.stats.Writes++
	l.stats.BytesWritten += int64(n)
	if n > 0 {
		lw := l.last
		if lw == nil {
			lw = &lastWrite{}
		}
		lw.ino, lw.off, lw.at = h.ino, off, time.Now()
		lw.data = append(lw.data[:0], data[:n]...)
		l.last = lw
	}
	return n, e
}

func (h *fileHandle) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	var buf []byte
	for _, d := range data {
		buf = append(buf, d...)
	}
	return h.Write(ctx, buf, off)
}

func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	l := h.n.lfs
	l.mu.Lock()
	delete(l.open, h)
	l.mu.Unlock()
	return h.lf.Release(ctx)
}

func (h *fileHandle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.n.lfs.fsync(h.rel(), h.ino, false)
}

func (h *fileHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}

// Setattr is reached only through node.Setattr, which did the bookkeeping.
func (h *fileHandle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}

func (h *fileHandle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

// Allocate saves the durable bytes that punching or zeroing destroys.
// Collapsing and inserting ranges shift data and are refused.
func (h *fileHandle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	l := h.n.lfs
	if mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0 {
		return syscall.EOPNOTSUPP
	}
	if e := l.inject(OpWrite, h.rel()); e != 0 {
		return e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0 {
		rec, e := l.recFor(h.ino, h.fd)
		if e != 0 {
			return e
		}
		if _, err := rec.save(fdReader(h.fd), int64(off), int64(off+size)); err != nil {
			return errnoOf(err)
		}
	} else if _, e := l.recFor(h.ino, h.fd); e != 0 {
		return e
	}
	return h.lf.Allocate(ctx, off, size, mode)
}

// recFor returns the undo log of ino, starting one (durable size = current
// size) if the file is clean. fd is open on ino. The caller holds f.mu.
func (f *server) recFor(ino uint64, fd int) (*fileRec, syscall.Errno) {
	if r, ok := f.files[ino]; ok {
		return r, 0
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, errnoOf(err)
	}
	r := &fileRec{durable: st.Size}
	f.files[ino] = r
	return r, 0
}

// beforeTruncate records a truncate of ino from size cur to size to. The
// caller holds f.mu.
func (f *server) beforeTruncate(ino uint64, read readAtFunc, cur, to int64) syscall.Errno {
	r, ok := f.files[ino]
	if !ok {
		r = &fileRec{durable: cur}
		f.files[ino] = r
	}
	if to < cur {
		if _, err := r.save(read, to, cur); err != nil {
			return errnoOf(err)
		}
	}
	return 0
}

// dirHandle wraps a loopback directory stream so that fsync of a directory
// reaches the model.
type dirHandle struct {
	ds  fs.DirStream
	n   *node
	ino uint64
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.lfs.fsync(d.n.rel(), d.ino, true)
}
