package lazyfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// write writes data to name on the mount (create or truncate), optionally
// fsyncing the file, and closes it.
func write(t *testing.T, f *FS, name string, data []byte, sync bool) {
	t.Helper()
	fh, err := os.OpenFile(f.Path(name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeAt writes data at off in existing file name, optionally fsyncing.
func writeAt(t *testing.T, f *FS, name string, data []byte, off int64, sync bool) {
	t.Helper()
	fh, err := os.OpenFile(f.Path(name), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
}

// syncDir fsyncs directory name ("" is the mount root).
func syncDir(t *testing.T, f *FS, name string) {
	t.Helper()
	d, err := os.Open(f.Path(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func powerLoss(t *testing.T, f *FS) {
	t.Helper()
	if err := f.PowerLoss(); err != nil {
		t.Fatal(err)
	}
}

// wantContent fails unless name on the mount holds exactly want.
func wantContent(t *testing.T, f *FS, name string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(f.Path(name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes %q, want %d bytes %q", name, len(got), trunc(got), len(want), trunc(want))
	}
}

// wantAbsent fails if name exists on the mount.
func wantAbsent(t *testing.T, f *FS, name string) {
	t.Helper()
	if _, err := os.Lstat(f.Path(name)); !os.IsNotExist(err) {
		t.Fatalf("%s: want absent, got err=%v", name, err)
	}
}

// wantBacking fails unless the backing directory matches the mount for name.
func wantBacking(t *testing.T, f *FS, name string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(f.Backing(), name))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("backing %s: got %q, %v; want %q", name, trunc(got), err, trunc(want))
	}
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return append(b[:64:64], "..."...)
	}
	return b
}
