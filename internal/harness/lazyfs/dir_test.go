package lazyfs

import (
	"os"
	"testing"
)

func TestCreateWithoutDirFsyncLost(t *testing.T) {
	f := MountT(t)
	write(t, f, "new", []byte("data"), true) // file fsynced, directory not
	powerLoss(t, f)
	wantAbsent(t, f, "new")
}

func TestCreateWithDirFsyncKept(t *testing.T) {
	f := MountT(t)
	write(t, f, "synced", []byte("data"), true)
	write(t, f, "unsynced", []byte("data"), false)
	syncDir(t, f, "")
	powerLoss(t, f)
	wantContent(t, f, "synced", []byte("data"))
	wantContent(t, f, "unsynced", nil) // entry durable, data never synced
}

func TestUnlinkWithoutDirFsyncUndone(t *testing.T) {
	f := MountT(t)
	write(t, f, "a", []byte("a-data"), true)
	write(t, f, "b", []byte("b-data"), true)
	syncDir(t, f, "")
	if err := os.Remove(f.Path("a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.Path("b")); err != nil {
		t.Fatal(err)
	}
	write(t, f, "c", nil, false) // a later entry change, also undone
	syncDir(t, f, "")            // makes all three durable...
	if err := os.Remove(f.Path("c")); err != nil {
		t.Fatal(err)
	}
	powerLoss(t, f) // ...so only the unlink of c is undone
	wantAbsent(t, f, "a")
	wantAbsent(t, f, "b")
	wantContent(t, f, "c", nil)

	write(t, f, "d", []byte("d-data"), true)
	syncDir(t, f, "")
	if err := os.Remove(f.Path("d")); err != nil {
		t.Fatal(err)
	}
	powerLoss(t, f)
	wantContent(t, f, "d", []byte("d-data"))
}

func TestMkdirRmdir(t *testing.T) {
	f := MountT(t)
	if err := os.Mkdir(f.Path("kept"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.Path("gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f, "")
	if err := os.Remove(f.Path("gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.Path("late"), 0o755); err != nil {
		t.Fatal(err)
	}
	powerLoss(t, f)
	for _, d := range []string{"kept", "gone"} {
		if st, err := os.Stat(f.Path(d)); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
			t.Fatalf("%s: want a 0755 dir, got %v, %v", d, st, err)
		}
	}
	wantAbsent(t, f, "late")
}

// A new directory hangs off its parent's entries: synced contents of a
// directory whose own entry never became durable vanish with it.
func TestNestedNewDirVanishes(t *testing.T) {
	f := MountT(t)
	if err := os.MkdirAll(f.Path("a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, f, "a/b/f", []byte("x"), true)
	syncDir(t, f, "a/b")
	syncDir(t, f, "a") // a's entries (b) durable, but a itself is not in the root
	powerLoss(t, f)
	wantAbsent(t, f, "a")

	if err := os.MkdirAll(f.Path("a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, f, "a/b/f", []byte("x"), true)
	for _, d := range []string{"a/b", "a", ""} {
		syncDir(t, f, d)
	}
	powerLoss(t, f)
	wantContent(t, f, "a/b/f", []byte("x"))
}

// Renaming a synced file between directories: durable in the target when
// the target is synced, gone from the source when the source is synced.
func TestRenameAcrossDirs(t *testing.T) {
	f := MountT(t)
	for _, d := range []string{"src", "dst"} {
		if err := os.Mkdir(f.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, f, "src/f", []byte("f"), true)
	syncDir(t, f, "src")
	syncDir(t, f, "")
	if err := os.Rename(f.Path("src/f"), f.Path("dst/f")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f, "dst") // target only: the file is durable in both
	powerLoss(t, f)
	wantContent(t, f, "src/f", []byte("f"))
	wantContent(t, f, "dst/f", []byte("f"))
	a, _ := os.Stat(f.Path("src/f"))
	b, _ := os.Stat(f.Path("dst/f"))
	if !os.SameFile(a, b) {
		t.Errorf("src/f and dst/f should be one inode (hard links)")
	}

	if err := os.Remove(f.Path("dst/f")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f, "dst")
	if err := os.Rename(f.Path("src/f"), f.Path("dst/f")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f, "src") // source only: the file is gone from both
	powerLoss(t, f)
	wantAbsent(t, f, "src/f")
	wantAbsent(t, f, "dst/f")
}
