package manifest

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/durable"
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
	return &dirError{msg: fmt.Sprintf("manifest dir %s: %s: %s", dir, what, durable.Reason(dir, err)), err: err}
}
