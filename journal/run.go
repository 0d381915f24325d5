// The bbolt transaction runner (view, update, write) and its panic handling.

package journal

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// view runs fn in a read-only bbolt transaction. fn must copy every byte
// slice it keeps: they point into the memory map, valid only until return.
func (j *Journal) view(fn func(tx *bolt.Tx) error) error {
	return j.run(false, fn)
}

// run runs fn in a bbolt transaction, read-write when writable, and
// commits it when fn returns nil and the transaction is writable. It is
// the one place the journal runs transactions, so the one place that turns
// a panic of bbolt (or a memory fault reading its map) into a
// *CorruptError: the transaction is not committed, so nothing was written,
// and the Journal is marked broken.
func (j *Journal) run(writable bool, fn func(tx *bolt.Tx) error) (err error) {
	if ce := j.broken.Load(); ce != nil {
		return ce
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			ce := &CorruptError{Path: j.path, Err: fmt.Errorf("panic in a transaction: %v", r)}
			j.broken.CompareAndSwap(nil, ce)
			if writable {
				j.stuck.Store(true)
			}
			err = ce
		}
	}()
	tx, err := j.db.Begin(writable)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := j.checkBuckets(tx); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if !writable {
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	j.commits.Add(1)
	return nil
}

// checkBuckets makes sure, once the file is migrated, that every bucket
// exists, so that call sites can use tx.Bucket without a nil check.
func (j *Journal) checkBuckets(tx *bolt.Tx) error {
	if !j.ready {
		return nil
	}
	for _, b := range [][]byte{bucketMeta, bucketState, bucketTxns, bucketRecords, bucketOpen} {
		if tx.Bucket(b) == nil {
			return &CorruptError{Path: j.path, Err: fmt.Errorf("bucket %s is missing", b)}
		}
	}
	return nil
}

// update runs fn in a read-write bbolt transaction and commits it; the
// commit fsyncs. On any error nothing is stored.
func (j *Journal) update(fn func(tx *bolt.Tx, now time.Time) error) error {
	now := j.now().UTC()
	return j.run(true, func(tx *bolt.Tx) error { return fn(tx, now) })
}

// write is update for a change to transaction id carrying recs: it reads
// the boot id first when there are records, and checks the file's buckets.
func (j *Journal) write(id string, recs []Record, fn func(tx *bolt.Tx, now time.Time, bootID string) error) error {
	var bootID string
	if len(recs) > 0 {
		var err error
		if bootID, err = j.bootID(); err != nil {
			return err
		}
		if bootID == "" {
			return errors.New("boot id is empty")
		}
	}
	return j.update(func(tx *bolt.Tx, now time.Time) error {
		if tx.Bucket(bucketRecords).Bucket([]byte(id)) == nil {
			if _, err := getTxn(tx, id); err != nil {
				return err
			}
			return fmt.Errorf("records/%s is missing: the file is damaged", id)
		}
		return fn(tx, now, bootID)
	})
}
