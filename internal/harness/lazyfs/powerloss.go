package lazyfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PowerLoss cuts the power: it unmounts, rewrites the backing directory to
// exactly the durable state (see the package documentation), forgets
// everything not durable, and mounts again at the same mountpoint.
//
// The caller must have closed every file and directory it opened on the
// mount (closing does not sync anything). If the mount is busy, PowerLoss
// returns an error naming the files still open and changes nothing. If the
// rewrite fails, the FS is left unmounted and the error says so.
// Inotify watches on the mount end with the unmount (IN_UNMOUNT) and must
// be added again.
func (f *server) PowerLoss() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.server == nil {
		return fmt.Errorf("lazyfs: PowerLoss: %s is not mounted", f.mountpoint)
	}
	start := time.Now()
	if err := f.unmountLocked(); err != nil {
		return fmt.Errorf("lazyfs: PowerLoss: %w", err)
	}
	if err := f.rebuild(); err != nil {
		return fmt.Errorf("lazyfs: PowerLoss: rewriting %s to its durable state (left unmounted): %w", f.backing, err)
	}
	if err := f.resetStash(); err != nil {
		return fmt.Errorf("lazyfs: PowerLoss: %w", err)
	}
	if err := f.mountLocked(); err != nil {
		return fmt.Errorf("lazyfs: PowerLoss: remount: %w", err)
	}
	f.stats.PowerLosses++
	f.stats.LastDuration = time.Since(start)
	return nil
}

// rebuild rewrites f.backing to the durable state. The FS is unmounted and
// the caller holds f.mu.
//
// File inodes keep their identity: their data is rolled back in place and
// they are hard-linked into a fresh tree built under the stash from the
// durable entries of each directory; directories are created anew. The
// fresh tree then replaces the contents of f.backing.
func (f *server) rebuild() error {
	idx := map[uint64]string{} // inode -> a current path to it
	for _, top := range []string{f.backing, f.stash} {
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			st, err := lstat(p)
			if err != nil {
				return err
			}
			if _, ok := idx[st.Ino]; !ok {
				idx[st.Ino] = p
			}
			return nil
		})
		if err != nil {
			return err
		}
	}

	f.stats.LastLostBytes, f.stats.LastRevertedFiles, f.stats.LastTornBytes = 0, 0, 0
	f.stats.LastRevertedDirs = len(f.dirs)
	for ino, rec := range f.files {
		p, ok := idx[ino]
		if !ok {
			return fmt.Errorf("inode %d with unsynced data is nowhere in %s or %s", ino, f.backing, f.stash)
		}
		lost, err := rec.revert(p)
		if err != nil {
			return err
		}
		f.stats.LastLostBytes += lost
		f.stats.LastRevertedFiles++
	}
	if lw := f.last; f.opts.TornLastWrite && lw != nil {
		if p, ok := idx[lw.ino]; ok {
			k := tornPrefix(f.rng.IntN, len(lw.data))
			if err := writeKeepTimes(p, lw.data[:k], lw.off); err != nil {
				return err
			}
			f.stats.LastTornBytes = int64(k)
		}
	}

	rootSt, err := lstat(f.backing)
	if err != nil {
		return err
	}
	fresh := filepath.Join(f.stash, ".new")
	if err := os.Mkdir(fresh, 0o700); err != nil {
		return err
	}
	b := builder{f: f, idx: idx, seen: map[uint64]bool{rootSt.Ino: true}}
	if err := b.fill(rootSt.Ino, fresh); err != nil {
		return err
	}

	old := filepath.Join(f.stash, ".old")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := moveEntries(f.backing, old); err != nil {
		return err
	}
	return moveEntries(fresh, f.backing)
}

// builder fills a fresh tree with the durable entries of directories.
type builder struct {
	f    *server
	idx  map[uint64]string
	seen map[uint64]bool // directories already placed
}

// fill creates in dst the durable entries of directory ino.
func (b *builder) fill(ino uint64, dst string) error {
	ents, ok := b.f.dirs[ino]
	if !ok {
		p, found := b.idx[ino]
		if !found {
			return fmt.Errorf("directory inode %d is nowhere in %s or %s", ino, b.f.backing, b.f.stash)
		}
		var err error
		if ents, err = readEntries(p); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(ents))
	for name := range ents {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		e := ents[name]
		src, ok := b.idx[e.ino]
		if !ok {
			return fmt.Errorf("inode %d (durable name %q) is nowhere in %s or %s", e.ino, name, b.f.backing, b.f.stash)
		}
		to := filepath.Join(dst, name)
		if !e.isDir() {
			if err := os.Link(src, to); err != nil {
				return err
			}
			continue
		}
		// A directory durably in two places (renamed, only the target
		// directory synced) is kept at the first in sorted order.
		if b.seen[e.ino] {
			continue
		}
		b.seen[e.ino] = true
		st, err := lstat(src)
		if err != nil {
			return err
		}
		if err := os.Mkdir(to, 0o700); err != nil {
			return err
		}
		if err := b.fill(e.ino, to); err != nil {
			return err
		}
		if err := copyMeta(to, st); err != nil {
			return err
		}
	}
	return nil
}

// copyMeta gives directory p the mode, owner and times of st.
func copyMeta(p string, st *syscall.Stat_t) error {
	if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := syscall.Chmod(p, st.Mode&07777); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// moveEntries renames every entry of from into to.
func moveEntries(from, to string) error {
	d, err := os.Open(from)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := os.Rename(filepath.Join(from, name), filepath.Join(to, name)); err != nil {
			return err
		}
	}
	return nil
}

// writeKeepTimes writes data at off in the file at p, keeping its times.
func writeKeepTimes(p string, data []byte, off int64) error {
	st, err := lstat(p)
	if err != nil {
		return err
	}
	fh, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := fh.WriteAt(data, off); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}
