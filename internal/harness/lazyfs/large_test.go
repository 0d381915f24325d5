package lazyfs

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"
)

// A 64 MiB fsynced file with 4 KiB overwritten: the power loss rolls back
// just those 4 KiB, in time independent of the file size.
func TestLargeFilePowerLoss(t *testing.T) {
	f := MountT(t)
	const size = 64 << 20
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	start := time.Now()
	fh, err := os.Create(f.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	for range size / len(chunk) {
		if _, err := fh.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	syncDir(t, f, "")
	t.Logf("write+fsync 64 MiB: %v", time.Since(start))

	writeAt(t, f, "big", bytes.Repeat([]byte("X"), 4096), 40<<20, false)
	start = time.Now()
	powerLoss(t, f)
	t.Logf("PowerLoss: %v (stats %+v)", time.Since(start), f.Stats())
	if s := f.Stats(); s.LastLostBytes != 4096 {
		t.Errorf("LastLostBytes = %d, want 4096", s.LastLostBytes)
	}

	fh, err = os.Open(f.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	got := make([]byte, len(chunk))
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := io.ReadFull(io.NewSectionReader(fh, off, int64(len(chunk))), got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, chunk) {
			t.Fatalf("chunk at %d differs after power loss", off)
		}
	}
}
