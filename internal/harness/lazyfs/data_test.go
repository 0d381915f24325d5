package lazyfs

import (
	"os"
	"syscall"
	"testing"
)

// Setup for data tests: "f" exists at mount time with "durable", so its
// directory entry is durable and only its data is at stake.
func mountWithFile(t *testing.T) *FS {
	t.Helper()
	f := MountT(t)
	write(t, f, "f", []byte("durable"), true)
	syncDir(t, f, "")
	return f
}

func TestUnsyncedWriteLost(t *testing.T) {
	f := mountWithFile(t)
	writeAt(t, f, "f", []byte("CHANGED-AND-LONGER"), 0, false)
	wantContent(t, f, "f", []byte("CHANGED-AND-LONGER"))
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("durable"))
	wantBacking(t, f, "f", []byte("durable"))
	if s := f.Stats(); s.LastLostBytes != int64(len("CHANGED-AND-LONGER")) {
		t.Errorf("LastLostBytes = %d, want %d", s.LastLostBytes, len("CHANGED-AND-LONGER"))
	}
}

func TestFsyncedWriteKept(t *testing.T) {
	f := mountWithFile(t)
	writeAt(t, f, "f", []byte("SYNCED-AND-LONGER"), 0, true)
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("SYNCED-AND-LONGER"))
}

// fsync through one descriptor covers writes made through another.
func TestFsyncAnyDescriptor(t *testing.T) {
	f := mountWithFile(t)
	w, err := os.OpenFile(f.Path("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("DURABLE"), 0); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(f.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r.Close()
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("DURABLE"))
}

// A write through an O_DSYNC descriptor is durable when it returns.
func TestODsyncWriteKept(t *testing.T) {
	f := mountWithFile(t)
	fh, err := os.OpenFile(f.Path("f"), os.O_RDWR|syscall.O_DSYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte("SYNC"), 0); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("SYNCble"))
}

func TestWriteAfterFsyncLost(t *testing.T) {
	f := mountWithFile(t)
	fh, err := os.OpenFile(f.Path("f"), os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString("+synced")
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	fh.WriteString("+lost")
	fh.WriteAt([]byte("D"), 0) // O_APPEND makes WriteAt fail; use a second fd
	fh.Close()
	writeAt(t, f, "f", []byte("X"), 0, false)
	wantContent(t, f, "f", []byte("Xurable+synced+lost"))
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("durable+synced"))
}

func TestTruncateAfterFsyncReverted(t *testing.T) {
	f := mountWithFile(t)
	if err := os.Truncate(f.Path("f"), 3); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f.Path("f"), 10); err != nil { // extend with zeros
		t.Fatal(err)
	}
	wantContent(t, f, "f", []byte("dur\x00\x00\x00\x00\x00\x00\x00"))
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("durable"))
}

// open(O_TRUNC) is a truncate like any other.
func TestOpenTruncReverted(t *testing.T) {
	f := mountWithFile(t)
	write(t, f, "f", []byte("new"), false)
	powerLoss(t, f)
	wantContent(t, f, "f", []byte("durable"))
}

// Several power losses in a row: each starts from the durable state.
func TestRepeatedPowerLoss(t *testing.T) {
	f := mountWithFile(t)
	for i := range 3 {
		writeAt(t, f, "f", []byte{'0' + byte(i)}, 0, true)
		writeAt(t, f, "f", []byte("lost"), 1, false)
		powerLoss(t, f)
		wantContent(t, f, "f", append([]byte{'0' + byte(i)}, "urable"...))
	}
}
