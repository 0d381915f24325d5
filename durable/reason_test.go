package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestReason(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, notDir := os.Stat(filepath.Join(file, "x", "y"))
	for _, c := range []struct {
		path string
		err  error
		want string
	}{
		{filepath.Join(file, "x", "y"), notDir, file + " is a file, not a directory"},
		{"/p", &os.PathError{Op: "open", Path: "/p", Err: syscall.EROFS}, "read-only file system"},
		{"/p", fmt.Errorf("open journal: %w", &os.PathError{Op: "open", Path: "/p", Err: syscall.EACCES}), "permission denied"},
		{"/p", errors.New("something else"), "something else"},
	} {
		if got := Reason(c.path, c.err); got != c.want {
			t.Errorf("Reason(%s, %v) = %q, want %q", c.path, c.err, got, c.want)
		}
	}
}
