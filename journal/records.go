// The records of a transaction: Append, Records and appendRecords.

package journal

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Append appends recs to the open transaction id and sets its phase, in one
// bbolt transaction that is committed (fsynced) when Append returns nil. It
// returns the stored records with Seq, Time and BootID assigned; a record
// with an empty Phase gets phase. phase must be an open phase (a
// transaction is closed only by Commit or Finish). Append to a closed
// transaction fails with an error wrapping ErrTxnClosed; on any error
// nothing is stored.
func (j *Journal) Append(id string, phase Phase, recs ...Record) ([]Record, error) {
	var out []Record
	err := j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		if err := checkPhase(phase); err != nil {
			return err
		}
		if !phase.Open() {
			return fmt.Errorf("phase %q is terminal: use Commit or Finish", phase)
		}
		st, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		st.Phase, st.Updated = phase, now
		if _, err := putTxn(tx, st); err != nil {
			return err
		}
		out, err = appendRecords(tx, id, phase, now, bootID, recs)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: append to %s (%s): %w", j.path, id, phase, err)
	}
	return out, nil
}

// Records returns the records of transaction id in Seq order.
func (j *Journal) Records(id string) ([]Record, error) {
	var out []Record
	err := j.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords).Bucket([]byte(id))
		if b == nil {
			return ErrNoTxn
		}
		return b.ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %x: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: records of %s: %w", j.path, id, err)
	}
	return out, nil
}

// appendRecords stores recs under records/<id> with fresh sequence
// numbers, now and bootID, and returns them decoded back from the stored
// bytes.
func appendRecords(tx *bolt.Tx, id string, phase Phase, now time.Time, bootID string, recs []Record) ([]Record, error) {
	b := tx.Bucket(bucketRecords).Bucket([]byte(id))
	out := make([]Record, 0, len(recs))
	for i, r := range recs {
		if r.Phase == "" {
			r.Phase = phase
		}
		if err := checkPhase(r.Phase); err != nil {
			return nil, fmt.Errorf("record %d (%s): %w", i, r.Step, err)
		}
		if !r.Step.Known() {
			return nil, fmt.Errorf("record %d: unknown step %q (known: %v)", i, r.Step, Steps)
		}
		seq, err := b.NextSequence()
		if err != nil {
			return nil, err
		}
		r.Seq, r.Time, r.BootID = seq, now, bootID
		v, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode record %d (%s): %w", i, r.Step, err)
		}
		if err := b.Put(u64(seq), v); err != nil {
			return nil, fmt.Errorf("store records/%s/%d: %w", id, seq, err)
		}
		var c Record
		if err := json.Unmarshal(v, &c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
