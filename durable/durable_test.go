package durable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "etcd.yaml")
	changed, err := WriteFile(p, []byte("one"), 0o600)
	if err != nil || !changed {
		t.Fatalf("first write: %v %v", changed, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Fatalf("content %q", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	// Identical bytes and mode: nothing is written, the inode is the same.
	before, _ := os.Stat(p)
	time.Sleep(10 * time.Millisecond)
	if changed, err := WriteFile(p, []byte("one"), 0o600); err != nil || changed {
		t.Fatalf("identical write: changed %v %v", changed, err)
	}
	after, _ := os.Stat(p)
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("identical bytes were rewritten")
	}
	// A mode change alone is a change.
	if changed, err := WriteFile(p, []byte("one"), 0o640); err != nil || !changed {
		t.Fatalf("mode change: %v %v", changed, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v after change", fi.Mode().Perm())
	}
	// New bytes replace the file by rename: a reader holding the old inode
	// still sees the old bytes whole.
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := WriteFile(p, []byte("two, longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := old.Read(b)
	if string(b[:n]) != "one" {
		t.Fatalf("old inode reads %q: the file was rewritten in place", b[:n])
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("staging files left: %v", entries)
	}
}

func TestWriteFileRefusesSymlinkAndDirectory(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o600)
	link := filepath.Join(dir, "link.yaml")
	os.Symlink(target, link)
	if _, err := WriteFile(link, []byte("x"), 0o600); !errors.Is(err, ErrSymlink) {
		t.Fatalf("write through a symlink: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatal("symlink target written")
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("symlink replaced")
	}
	sub := filepath.Join(dir, "sub.yaml")
	os.Mkdir(sub, 0o700)
	if _, err := WriteFile(sub, []byte("x"), 0o600); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("write over a directory: %v", err)
	}
	if _, _, err := ReadRegular(link); !errors.Is(err, ErrSymlink) {
		t.Fatalf("ReadRegular of a symlink: %v", err)
	}
}

func TestWriteFileIntoMissingDirFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "f")
	if _, err := WriteFile(p, []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("write into a missing dir: %v", err)
	}
}

func TestRemove(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, nil, 0o600)
	if removed, err := Remove(p); err != nil || !removed {
		t.Fatalf("Remove: %v %v", removed, err)
	}
	if removed, err := Remove(p); err != nil || removed {
		t.Fatalf("Remove of an absent file: %v %v", removed, err)
	}
}

func TestCheckDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckDir(dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("CheckDir left its probe: %v", entries)
	}
	link := filepath.Join(t.TempDir(), "l")
	os.Symlink(dir, link)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for p, want := range map[string]string{link: "symbolic link", file: "not a directory", filepath.Join(dir, "nope"): "does not exist", "/proc/1": "not writable"} {
		if err := CheckDir(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckDir(%s) = %v, want %q", p, err, want)
		}
	}
}

func TestRemoveInMissingDir(t *testing.T) {
	if removed, err := Remove(filepath.Join(t.TempDir(), "nodir", "f")); err != nil || removed {
		t.Fatalf("Remove in a missing dir: %v %v", removed, err)
	}
}

func TestMkdirAll(t *testing.T) {
	d := filepath.Join(t.TempDir(), "a", "b", "c")
	if err := MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("MkdirAll: %v %v", fi, err)
	}
	if err := MkdirAll(d, 0o700); err != nil {
		t.Fatalf("MkdirAll of an existing dir: %v", err)
	}
}
