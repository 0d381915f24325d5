package lazyfs

import (
	"errors"
	"io"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileRec is the undo log of one regular-file inode that changed since its
// last fsync (or since mount). durable is the size the file had then; spans
// hold the bytes of [0, durable) that were overwritten, truncated away or
// punched since, each range saved once (the first save wins, so the saved
// bytes are the durable ones).
type fileRec struct {
	durable int64
	spans   []span // sorted by off, non-overlapping
}

type span struct {
	off int64
	old []byte
}

func (s span) end() int64 { return s.off + int64(len(s.old)) }

// readAtFunc reads len(p) bytes at off; short reads are allowed at EOF.
type readAtFunc func(p []byte, off int64) (int, error)

// save records the current bytes of [off, end) ∩ [0, durable) that no earlier
// save covers, reading them with read. It must run before the range changes.
// It returns the number of bytes it saved.
func (r *fileRec) save(read readAtFunc, off, end int64) (int64, error) {
	if off < 0 {
		off = 0
	}
	if end > r.durable {
		end = r.durable
	}
	if off >= end {
		return 0, nil
	}
	var gaps [][2]int64
	pos := off
	// First span that ends after off.
	i, _ := slices.BinarySearchFunc(r.spans, off, func(s span, t int64) int {
		if s.end() <= t {
			return -1
		}
		return 1
	})
	for ; i < len(r.spans) && r.spans[i].off < end; i++ {
		s := r.spans[i]
		if s.off > pos {
			gaps = append(gaps, [2]int64{pos, s.off})
		}
		pos = max(pos, s.end())
	}
	if pos < end {
		gaps = append(gaps, [2]int64{pos, end})
	}
	var saved int64
	for _, g := range gaps {
		buf := make([]byte, g[1]-g[0])
		n, err := read(buf, g[0])
		if err != nil && !errors.Is(err, io.EOF) {
			return saved, err
		}
		// A durable byte past the current EOF cannot exist: shrinking
		// saves the range first. Zero-fill defensively anyway.
		clear(buf[n:])
		r.spans = append(r.spans, span{off: g[0], old: buf})
		saved += int64(len(buf))
	}
	if len(gaps) > 0 {
		slices.SortFunc(r.spans, func(a, b span) int {
			switch {
			case a.off < b.off:
				return -1
			case a.off > b.off:
				return 1
			}
			return 0
		})
	}
	return saved, nil
}

// revert rolls the inode at path back to its durable content: it writes the
// saved bytes back, truncates to the durable size and restores the atime and
// mtime it had before. It returns how many bytes it rolled back or cut off.
func (r *fileRec) revert(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	var lost int64
	for _, s := range r.spans {
		if _, err := f.WriteAt(s.old, s.off); err != nil {
			return lost, err
		}
		lost += int64(len(s.old))
	}
	if st.Size > r.durable {
		lost += st.Size - r.durable
	}
	if err := f.Truncate(r.durable); err != nil {
		return lost, err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return lost, err
	}
	return lost, f.Close()
}

// fdReader returns a readAtFunc over fd. If fd is not open for reading
// (O_WRONLY), it reads through a fresh read-only open of /proc/self/fd/N,
// which reaches the same inode.
func fdReader(fd int) readAtFunc {
	return func(p []byte, off int64) (int, error) {
		n, err := preadFull(fd, p, off)
		if !errors.Is(err, syscall.EBADF) {
			return n, err
		}
		f, err := os.Open("/proc/self/fd/" + itoa(int64(fd)))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return preadFull(int(f.Fd()), p, off)
	}
}

// pathReader returns a readAtFunc that opens path for each call.
func pathReader(path string) readAtFunc {
	return func(p []byte, off int64) (int, error) {
		f, err := os.Open(path)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		return preadFull(int(f.Fd()), p, off)
	}
}

func preadFull(fd int, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := syscall.Pread(fd, p[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

// lastWrite is the most recent WRITE request whose file was not fsynced since.
type lastWrite struct {
	ino  uint64
	off  int64
	data []byte
	at   time.Time
}

// tornPrefix picks how many leading bytes of an n-byte write reach the disk
// in a torn write: a multiple of 512 strictly between 0 and n, or n/2 when n
// is at most one sector.
func tornPrefix(intN func(int) int, n int) int {
	if n <= 1 {
		return 0
	}
	if n <= 512 {
		return n / 2
	}
	cuts := (n - 1) / 512
	return 512 * (1 + intN(cuts))
}
