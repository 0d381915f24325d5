// Package durable is the one way stratum-upgrade writes a file it owns:
// staged under a hidden name in the target's own directory, fsynced, renamed
// over the target, and the directory fsynced. It is a leaf: it imports
// nothing of this module, and every product package may use it.
//
// Every function states what holds on success, on error and after a crash.
// Errors wrap ErrSymlink or ErrNotRegular where the path is not a regular
// file, for errors.Is.
package durable

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// ErrSymlink is returned when a path this package would write or read is a
// symbolic link. Links are never followed: a link where a file belongs means
// someone else put it there, and writing through it would land outside the
// directory the caller owns.
var ErrSymlink = errors.New("is a symbolic link")

// ErrNotRegular is returned when a path that must be a regular file is a
// directory, device, socket or other non-regular entry.
var ErrNotRegular = errors.New("is not a regular file")

// WriteFile makes path hold exactly data with mode perm, atomically and durably.
//
// The bytes are staged in a hidden file in path's own directory (never /tmp,
// which may be another filesystem, and never a visible name, which kubelet
// would run as a pod), fsynced, renamed over path, and then the directory is
// fsynced so the rename itself survives power loss. When path already holds
// exactly data with mode perm nothing is written and changed is false: a
// rewrite of identical bytes would still wake every inotify watcher.
//
// On error path holds either its old content or the new content, never a
// mix, and no staging file is left behind. A symlink at path is refused with
// ErrSymlink and not followed.
func WriteFile(path string, data []byte, perm fs.FileMode) (changed bool, err error) {
	same, err := holds(path, data, perm)
	if err != nil {
		return false, err
	}
	if same {
		// The bytes may be there from a write whose process died between
		// the rename and the directory fsync; a caller that now journals
		// the write as done must not lose it to a power cut. One fsync of
		// the directory is cheap, and no inotify event.
		return false, SyncDir(filepath.Dir(path))
	}
	dir := filepath.Dir(path)
	// Not renameio.WriteFile: it copies an existing file's mode over the
	// one asked for, and the caller's mode must win (a restore puts back
	// the mode a snapshot recorded).
	pf, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(perm))
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	defer pf.Cleanup()
	if _, err := pf.Write(data); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	// CloseAtomicallyReplace fsyncs the staged file, closes it and renames
	// it over path.
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return true, err
	}
	return true, nil
}

// holds reports whether path is a regular file with exactly data and perm.
func holds(path string, data []byte, perm fs.FileMode) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := CheckRegular(path, fi); err != nil {
		return false, err
	}
	if fi.Mode().Perm() != perm.Perm() || fi.Size() != int64(len(data)) {
		return false, nil
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return bytes.Equal(old, data), nil
}

// CheckRegular returns an error naming path when fi (from Lstat) is a
// symlink (ErrSymlink) or any other non-regular entry (ErrNotRegular).
func CheckRegular(path string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s %w; refusing to follow it (remove the link and re-run)", path, ErrSymlink)
	case fi.IsDir():
		return fmt.Errorf("%s %w: it is a directory", path, ErrNotRegular)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %w: it is a named pipe, socket or device", path, ErrNotRegular)
	}
	return nil
}

// ReadRegular reads path without following a symlink at its last element.
func ReadRegular(path string) ([]byte, fs.FileMode, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, 0, err
	}
	if err := CheckRegular(path, fi); err != nil {
		return nil, 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	return b, fi.Mode().Perm(), nil
}

// Remove deletes path and fsyncs its directory, so a removal the caller
// journaled as done stays done after power loss. A path already absent is
// not an error (removed is false).
func Remove(path string) (removed bool, err error) {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Perhaps removed by a process that died before the fsync.
			if err := SyncDir(filepath.Dir(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, err
			}
			return false, nil
		}
		return false, fmt.Errorf("remove %s: %w", path, err)
	}
	return true, SyncDir(filepath.Dir(path))
}

// MkdirAll is os.MkdirAll, made durable: the parent of every directory it
// creates is fsynced, so a directory that held a journaled file still
// exists after a power cut.
func MkdirAll(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err // a *fs.PathError: it names the path
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err // a *fs.PathError: "mkdir DIR: ..."
	}
	for _, d := range created {
		if err := SyncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// SyncDir fsyncs directory dir, making the creations, renames and removals
// of its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// CheckDir verifies that dir is an existing, writable directory that is not
// itself a symlink. The returned error says which of these failed.
func CheckDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("directory %s does not exist", dir)
	}
	if err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("directory %s %w; point the flag at the real directory", dir, ErrSymlink)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".stratum-probe")
	if err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return nil
}
