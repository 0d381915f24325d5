package durable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadInput: a file up to MaxInput is read whole; a larger one is
// refused naming its size; a symlink or a directory is refused as by
// ReadRegular.
func TestReadInput(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(ok, []byte(strings.Repeat("a", MaxInput)), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadInput(ok); err != nil || len(b) != MaxInput {
		t.Fatalf("a file of MaxInput bytes: %d bytes, %v", len(b), err)
	}
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(200 << 20); err != nil { // sparse: 200 MB that takes no disk
		t.Fatal(err)
	}
	f.Close()
	if _, err := ReadInput(big); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "209715200 bytes") {
		t.Errorf("a 200 MB file: %v", err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadInput(link); !errors.Is(err, ErrSymlink) {
		t.Errorf("a symlink: %v", err)
	}
	if _, err := ReadInput(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a directory: %v", err)
	}
}
