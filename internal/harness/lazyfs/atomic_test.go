package lazyfs

import (
	"os"
	"testing"
)

// replace is the atomic-write pattern: write a temp file, fsync it, rename
// it over name, and (if syncDir) fsync the directory.
func replace(t *testing.T, f *FS, name string, data []byte, dirSync bool) {
	t.Helper()
	write(t, f, name+".tmp", data, true)
	if err := os.Rename(f.Path(name+".tmp"), f.Path(name)); err != nil {
		t.Fatal(err)
	}
	if dirSync {
		syncDir(t, f, "")
	}
}

func TestAtomicReplaceSurvives(t *testing.T) {
	f := mountWithFile(t)
	replace(t, f, "f", []byte("new version"), true)
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("new version"))
	wantAbsent(t, f, "f.tmp")
}

func TestAtomicReplaceWithoutDirFsyncRollsBack(t *testing.T) {
	f := mountWithFile(t)
	replace(t, f, "f", []byte("new version"), false)
	wantContent(t, f, "f", []byte("new version"))
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("durable"))
	wantAbsent(t, f, "f.tmp")
}

// Without the fsync of the temp file, the rename can be durable while the
// data is not: the classic zero-length file after a crash.
func TestRenameWithoutDataFsyncLeavesEmpty(t *testing.T) {
	f := mountWithFile(t)
	write(t, f, "f.tmp", []byte("new version"), false)
	if err := os.Rename(f.Path("f.tmp"), f.Path("f")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, f, "")
	powerLoss(t, f)
	wantContent(t, f, "f", nil)
}
