package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// dirError is an OS error about the manifest directory in the operator's
// words: the message names the directory once and says what is wrong with
// it ("/x is a file, not a directory"); it wraps the original
// error, so errors.Is and errors.As still see the *fs.PathError and errno.
type dirError struct {
	msg string
	err error
}

func (e *dirError) Error() string { return e.msg }
func (e *dirError) Unwrap() error { return e.err }

// dirErr is err, from doing what to dir, as a *dirError: "manifest dir
// DIR: cannot create it: P is a file, not a directory".
func dirErr(dir, what string, err error) error {
	return &dirError{msg: fmt.Sprintf("manifest dir %s: %s: %s", dir, what, osReason(dir, err)), err: err}
}

// osReason is what is wrong, without Go's "op path:" prefixes: the errno's
// text, and for ENOTDIR which part of path is not a directory.
func osReason(path string, err error) string {
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
