package lazyfs

import (
	"bytes"
	"os"
	"testing"
)

// With TornLastWrite, a power loss keeps a prefix (a multiple of 512 bytes,
// neither empty nor whole) of the last unsynced write on top of the durable
// content, and loses every earlier unsynced write in full.
func TestTornWriteKeepsPrefixOfLastWrite(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		f := MountOptsT(t, Options{TornLastWrite: true, Seed: seed})
		durable := bytes.Repeat([]byte("D"), 8192)
		write(t, f, "f", durable, true)
		write(t, f, "other", []byte("other"), true)
		syncDir(t, f, "")
		writeAt(t, f, "f", bytes.Repeat([]byte("E"), 4096), 4096, false) // earlier: lost
		writeAt(t, f, "other", []byte("OTHER"), 0, false)                // earlier: lost
		writeAt(t, f, "f", bytes.Repeat([]byte("L"), 4096), 0, false)    // last: torn
		powerLoss(t, f)

		got, err := os.ReadFile(f.Path("f"))
		if err != nil {
			t.Fatal(err)
		}
		k := bytes.IndexByte(got, 'D')
		if len(got) != len(durable) || k <= 0 || k >= 4096 || k%512 != 0 ||
			!bytes.Equal(got[:k], bytes.Repeat([]byte("L"), k)) || !bytes.Equal(got[k:], durable[k:]) {
			t.Fatalf("seed %d: want a 512-aligned prefix of L over D, got %q...", seed, trunc(got))
		}
		if s := f.Stats(); s.LastTornBytes != int64(k) {
			t.Errorf("seed %d: LastTornBytes = %d, want %d", seed, s.LastTornBytes, k)
		}
		wantContent(t, f, "other", []byte("other"))
		t.Logf("seed %d: kept %d of 4096 bytes", seed, k)
	}
}

// A write followed by fsync is not torn, even with TornLastWrite.
func TestTornWriteSparesSyncedWrite(t *testing.T) {
	f := MountOptsT(t, Options{TornLastWrite: true})
	write(t, f, "f", bytes.Repeat([]byte("S"), 4096), true)
	syncDir(t, f, "")
	powerLoss(t, f)
	wantContent(t, f, "f", bytes.Repeat([]byte("S"), 4096))
	if s := f.Stats(); s.LastTornBytes != 0 {
		t.Errorf("LastTornBytes = %d, want 0", s.LastTornBytes)
	}
}
