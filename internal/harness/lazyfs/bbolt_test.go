package lazyfs

import (
	"fmt"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// bbolt on the mount (mmap reads, pwrite + fdatasync commits): every
// committed transaction survives each power loss and the database opens
// and checks clean. Each cycle ends with an undurable transaction: without
// torn writes a NoSync commit, which is lost; with torn writes a commit
// whose second fdatasync fails (EIO), so that the write torn by the power
// cut is the meta page (or a data page), which bbolt must survive.
func TestBboltSurvivesPowerLoss(t *testing.T) {
	for _, torn := range []bool{false, true} {
		t.Run(fmt.Sprintf("torn=%v", torn), func(t *testing.T) {
			testBbolt(t, Options{TornLastWrite: torn, Seed: 7})
		})
	}
}

func testBbolt(t *testing.T, opts Options) {
	f := MountOptsT(t, opts)
	path := f.Path("db")
	bucket := []byte("b")

	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	syncDir(t, f, "") // bbolt does not fsync the directory it creates the file in

	committed := 0
	for cycle := range 5 {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatalf("cycle %d: open: %v", cycle, err)
		}
		err = db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			b := tx.Bucket(bucket)
			n := 0
			if b != nil {
				n = b.Stats().KeyN
			}
			if n != committed && !(opts.TornLastWrite && n == committed+1) {
				return fmt.Errorf("have %d keys, want %d", n, committed)
			}
			committed = n
			for i := range committed {
				if v := b.Get(key(i)); len(v) != 1000 {
					return fmt.Errorf("key %d: value of %d bytes", i, len(v))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		for range 20 {
			err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists(bucket)
				if err != nil {
					return err
				}
				return b.Put(key(committed), make([]byte, 1000))
			})
			if err != nil {
				t.Fatal(err)
			}
			committed++
		}
		var rule *Injection
		if opts.TornLastWrite {
			rule = f.Inject(Rule{Op: OpFsync, Path: "db", Errno: syscall.EIO, After: 1, Times: 1})
		} else {
			db.NoSync = true
		}
		err = db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucket).Put(key(committed), make([]byte, 1000))
		})
		if rule != nil {
			if err == nil || rule.Fired() != 1 {
				t.Fatalf("commit with failing fdatasync: err=%v, fired %d", err, rule.Fired())
			}
			f.Clear()
		} else if err != nil {
			t.Fatal(err)
		}
		db.Close() // may report the failed commit again
		powerLoss(t, f)
		s := f.Stats()
		t.Logf("cycle %d: %+v", cycle, s)
		if opts.TornLastWrite && s.LastTornBytes == 0 {
			t.Fatalf("cycle %d: no torn write", cycle)
		}
	}
}

func key(i int) []byte { return fmt.Appendf(nil, "key-%08d", i) }
