// The transaction lifecycle: Begin, Update, Commit, Finish, and txns/ helpers.

package journal

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// Begin stores t as a new transaction in phase planned and returns the
// stored copy. The journal assigns ID, Phase, Started and Updated and
// clears Ended, whatever t holds. Kind must be one of Kinds. When a transaction is already open Begin fails with an
// error wrapping ErrTxnOpen and stores nothing.
func (j *Journal) Begin(t Txn) (Txn, error) {
	if !KnownKind(t.Kind) {
		return Txn{}, fmt.Errorf("journal %s: begin: unknown kind %q (known: %s)", j.path, t.Kind, strings.Join(Kinds, ", "))
	}
	var out Txn
	err := j.update(func(tx *bolt.Tx, now time.Time) error {
		if id := tx.Bucket(bucketOpen).Get(keyOpenTxn); id != nil {
			return fmt.Errorf("%w (%s); resume or roll it back first", ErrTxnOpen, id)
		}
		txns := tx.Bucket(bucketTxns)
		id, err := newID(txns, now)
		if err != nil {
			return err
		}
		seq, err := txns.NextSequence()
		if err != nil {
			return err
		}
		t.ID, t.Phase, t.Started, t.Updated, t.Ended = id, PhasePlanned, now, now, time.Time{}
		if out, err = putTxn(tx, &storedTxn{Txn: t, Seq: seq}); err != nil {
			return err
		}
		if _, err := tx.Bucket(bucketRecords).CreateBucket([]byte(id)); err != nil {
			return fmt.Errorf("create records/%s: %w", id, err)
		}
		return tx.Bucket(bucketOpen).Put(keyOpenTxn, []byte(id))
	})
	if err != nil {
		return Txn{}, fmt.Errorf("journal %s: begin %s: %w", j.path, t.Kind, err)
	}
	return out, nil
}

// newID returns an unused id: the UTC second of now and 4 random hex digits.
func newID(txns *bolt.Bucket, now time.Time) (string, error) {
	for range 32 {
		var r [2]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("transaction id: %w", err)
		}
		id := now.Format("20060102T150405Z") + "-" + hex.EncodeToString(r[:])
		if txns.Get([]byte(id)) == nil {
			return id, nil
		}
	}
	return "", errors.New("transaction id: 32 random ids in the same second were all taken")
}

// Update applies fn to a copy of the open transaction id and stores the
// result together with recs, in one bbolt transaction committed (fsynced)
// when Update returns nil. fn may change any field but ID, Kind and the
// times, which the journal owns; the phase it leaves must be an open one
// (Commit and Finish close a transaction). Records with an empty Phase get
// the resulting phase. When fn returns an error, or the transaction is
// closed (ErrTxnClosed), nothing is stored.
func (j *Journal) Update(id string, fn func(*Txn) error, recs ...Record) error {
	err := j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		st, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		t := st.Txn // fn gets a copy; st came from JSON and shares nothing
		if err := fn(&t); err != nil {
			return err
		}
		switch {
		case t.ID != st.ID:
			return fmt.Errorf("the update changed the id to %q", t.ID)
		case t.Kind != st.Kind:
			return fmt.Errorf("the update changed the kind from %q to %q", st.Kind, t.Kind)
		}
		if err := checkPhase(t.Phase); err != nil {
			return err
		}
		if !t.Phase.Open() {
			return fmt.Errorf("phase %q is terminal: use Commit or Finish", t.Phase)
		}
		t.Started, t.Updated, t.Ended = st.Started, now, time.Time{}
		if _, err := putTxn(tx, &storedTxn{Txn: t, Seq: st.Seq}); err != nil {
			return err
		}
		_, err = appendRecords(tx, id, t.Phase, now, bootID, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal %s: update %s: %w", j.path, id, err)
	}
	return nil
}

// Commit closes the open transaction id as committed and makes st the
// persisted node state, in one bbolt transaction together with recs: after
// a crash either all of it is stored or none. The transaction's To is set
// to st's YAML and Ended to now. st must validate.
func (j *Journal) Commit(id string, st *nodestate.NodeState, recs ...Record) error {
	b, err := encodeState(st)
	if err != nil {
		return fmt.Errorf("journal %s: commit %s: node state: %w", j.path, id, err)
	}
	err = j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		t, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		t.Phase, t.Updated, t.Ended, t.To = PhaseCommitted, now, now, b
		if _, err := putTxn(tx, t); err != nil {
			return err
		}
		if err := tx.Bucket(bucketState).Put(keyCurrent, b); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOpen).Delete(keyOpenTxn); err != nil {
			return err
		}
		_, err = appendRecords(tx, id, PhaseCommitted, now, bootID, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal %s: commit %s: %w", j.path, id, err)
	}
	return nil
}

// Finish closes the open transaction id as rolled-back or rollback-failed,
// in one bbolt transaction together with recs. A non-empty reason replaces
// Reason and a non-nil detail replaces Detail. The node state is not
// changed: a transaction that did not commit never changed it.
func (j *Journal) Finish(id string, phase Phase, reason string, detail []byte, recs ...Record) error {
	if phase != PhaseRolledBack && phase != PhaseRollbackFailed {
		return fmt.Errorf("journal %s: finish %s: phase %q is not %q or %q (use Commit to commit)", j.path, id, phase, PhaseRolledBack, PhaseRollbackFailed)
	}
	err := j.write(id, recs, func(tx *bolt.Tx, now time.Time, bootID string) error {
		t, err := getOpenTxn(tx, id)
		if err != nil {
			return err
		}
		t.Phase, t.Updated, t.Ended = phase, now, now
		if reason != "" {
			t.Reason = reason
		}
		if detail != nil {
			t.Detail = clone(detail)
		}
		if _, err := putTxn(tx, t); err != nil {
			return err
		}
		if err := tx.Bucket(bucketOpen).Delete(keyOpenTxn); err != nil {
			return err
		}
		_, err = appendRecords(tx, id, phase, now, bootID, recs)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal %s: finish %s as %s: %w", j.path, id, phase, err)
	}
	return nil
}

// getTxn decodes txns/<id>; the result shares no memory with bbolt.
func getTxn(tx *bolt.Tx, id string) (*storedTxn, error) {
	v := tx.Bucket(bucketTxns).Get([]byte(id))
	if v == nil {
		return nil, ErrNoTxn
	}
	var st storedTxn
	if err := json.Unmarshal(v, &st); err != nil {
		return nil, fmt.Errorf("txns/%s: %w", id, err)
	}
	fromStored(&st.Txn, stateDir(tx))
	return &st, nil
}

// getOpenTxn is getTxn for a transaction that must be open and named by
// open/txn.
func getOpenTxn(tx *bolt.Tx, id string) (*storedTxn, error) {
	st, err := getTxn(tx, id)
	if err != nil {
		return nil, err
	}
	if !st.Phase.Open() {
		return nil, fmt.Errorf("%w: phase %q", ErrTxnClosed, st.Phase)
	}
	if open := tx.Bucket(bucketOpen).Get(keyOpenTxn); string(open) != id {
		return nil, fmt.Errorf("phase %q is open but open/txn is %q: the file is inconsistent", st.Phase, open)
	}
	return st, nil
}

// putTxn stores st and returns the Txn decoded back from the stored bytes,
// so that the caller's value shares nothing with what it gets.
func putTxn(tx *bolt.Tx, st *storedTxn) (Txn, error) {
	stored := *st
	toStored(&stored.Txn, stateDir(tx))
	b, err := json.Marshal(&stored)
	if err != nil {
		return Txn{}, fmt.Errorf("encode txn %s: %w", st.ID, err)
	}
	if err := tx.Bucket(bucketTxns).Put([]byte(st.ID), b); err != nil {
		return Txn{}, fmt.Errorf("store txns/%s: %w", st.ID, err)
	}
	var out storedTxn
	if err := json.Unmarshal(b, &out); err != nil {
		return Txn{}, fmt.Errorf("decode txn %s: %w", st.ID, err)
	}
	fromStored(&out.Txn, stateDir(tx))
	return out.Txn, nil
}
