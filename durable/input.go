package durable

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxInput is the most ReadInput reads: an operator's input file (a node
// state, a release) is a few KiB; anything near this is not one, and
// reading it whole would cost its size in memory several times over.
const MaxInput = 1 << 20

// ErrTooLarge is wrapped by ReadInput's error for a file over MaxInput.
var ErrTooLarge = errors.New("is too large")

// ReadInput reads an operator's input file as ReadRegular does, but never
// more than MaxInput bytes: a larger file is an error wrapping ErrTooLarge
// that says its size, read no further than the limit.
func ReadInput(path string) ([]byte, error) {
	// Checked before the open too: opening a named pipe would block.
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := CheckRegular(path, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, err
	}
	if err := CheckRegular(path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxInput+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxInput {
		return nil, fmt.Errorf("%s %w: %d bytes, more than the %d (1 MiB) an input file may have; is it the right file?", path, ErrTooLarge, max(fi.Size(), int64(len(b))), MaxInput)
	}
	return b, nil
}
