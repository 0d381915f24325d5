package lazyfs

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

func TestInjectENOSPCOnWrite(t *testing.T) {
	f := mountWithFile(t)
	if err := os.Mkdir(f.Path("m"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, f, "m/x.yaml", []byte("old"), true)
	in := f.Inject(Rule{Op: OpWrite, Path: "m/*.yaml", Errno: syscall.ENOSPC})

	fh, err := os.OpenFile(f.Path("m/x.yaml"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fh.WriteAt([]byte("NEW!"), 0)
	fh.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write: got %v, want ENOSPC", err)
	}
	wantContent(t, f, "m/x.yaml", []byte("old"))
	wantBacking(t, f, "m/x.yaml", []byte("old"))
	writeAt(t, f, "f", []byte("D"), 0, false) // path does not match: not failed
	if in.Fired() != 1 || in.Seen() != 1 {
		t.Errorf("counters: seen %d fired %d, want 1 1", in.Seen(), in.Fired())
	}

	f.Clear()
	writeAt(t, f, "m/x.yaml", []byte("NEW!"), 0, false)
	wantContent(t, f, "m/x.yaml", []byte("NEW!"))
	if in.Fired() != 1 {
		t.Errorf("fired after Clear: %d, want 1", in.Fired())
	}
}

// EIO on fsync reaches the caller and the data stays undurable.
func TestInjectEIOOnFsync(t *testing.T) {
	f := mountWithFile(t)
	in := f.Inject(Rule{Op: OpFsync, Path: "f", Errno: syscall.EIO, After: 1, Times: 1})
	fh, err := os.OpenFile(f.Path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	fh.WriteAt([]byte("one"), 0)
	if err := fh.Sync(); err != nil { // After: 1 lets the first through
		t.Fatalf("first fsync: %v", err)
	}
	fh.WriteAt([]byte("two"), 0)
	if err := fh.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("second fsync: got %v, want EIO", err)
	}
	fh.Close()
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("oneable"))
	if in.Seen() != 2 || in.Fired() != 1 {
		t.Errorf("counters: seen %d fired %d, want 2 1", in.Seen(), in.Fired())
	}
}

// Namespace operations fail without effect.
func TestInjectNamespaceOps(t *testing.T) {
	f := mountWithFile(t)
	for _, r := range []Rule{
		{Op: OpCreate, Path: "new", Errno: syscall.EDQUOT},
		{Op: OpRename, Path: "f", Errno: syscall.EIO},
		{Op: OpMkdir, Path: "d", Errno: syscall.ENOSPC},
		{Op: OpUnlink, Path: "f", Errno: syscall.EROFS},
	} {
		f.Inject(r)
	}
	if _, err := os.Create(f.Path("new")); !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("create: %v", err)
	}
	if err := os.Rename(f.Path("f"), f.Path("g")); !errors.Is(err, syscall.EIO) {
		t.Errorf("rename: %v", err)
	}
	if err := os.Mkdir(f.Path("d"), 0o755); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("mkdir: %v", err)
	}
	if err := os.Remove(f.Path("f")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("unlink: %v", err)
	}
	wantAbsent(t, f, "new")
	wantAbsent(t, f, "g")
	wantAbsent(t, f, "d")
	wantContent(t, f, "f", []byte("durable"))
}

// OpMutate counts every change and, with After, fails all changes after
// the n-th: a cut. Reads still work.
func TestMutateRuleCutsAfterN(t *testing.T) {
	f := MountT(t)
	count := f.Inject(Rule{Op: OpMutate, Errno: syscall.EIO, After: 1 << 30})
	if err := os.WriteFile(f.Path("a"), []byte("a"), 0o600); err != nil { // create + write
		t.Fatal(err)
	}
	if err := os.Rename(f.Path("a"), f.Path("b")); err != nil {
		t.Fatal(err)
	}
	if n := count.Seen(); n != 3 {
		t.Fatalf("seen %d changes, want 3 (create, write, rename)", n)
	}
	if count.Fired() != 0 {
		t.Fatal("fired before its After")
	}
	f.Clear()
	cut := f.Inject(Rule{Op: OpMutate, Errno: syscall.EIO, After: 1})
	if err := os.WriteFile(f.Path("c"), []byte("c"), 0o600); err == nil {
		t.Fatal("the write after the cut succeeded")
	}
	if err := os.Rename(f.Path("b"), f.Path("d")); err == nil {
		t.Fatal("a rename after the cut succeeded")
	}
	if b, err := os.ReadFile(f.Path("b")); err != nil || string(b) != "a" {
		t.Fatalf("a read after the cut: %q %v", b, err)
	}
	if cut.Fired() < 2 {
		t.Fatalf("fired %d times", cut.Fired())
	}
}
