package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Reason is what is wrong in err, an error from a file system call on
// path, in an operator's words and without Go's "op path:" prefixes: the
// errno's text ("permission denied", "read-only file system"), and for
// ENOTDIR which part of path is a file ("/x is a file, not a directory").
// The caller names path once in its own message.
func Reason(path string, err error) string {
	if errors.Is(err, syscall.ENOTDIR) {
		for p := filepath.Clean(path); ; p = filepath.Dir(p) {
			if fi, serr := os.Lstat(p); serr == nil && !fi.IsDir() {
				return fmt.Sprintf("%s is a file, not a directory", p)
			}
			if filepath.Dir(p) == p {
				break
			}
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
