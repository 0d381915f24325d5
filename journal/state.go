// Reads of the schema version, node state and transactions; PutNodeState.

package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// SchemaVersion returns the schema version stored in the file.
func (j *Journal) SchemaVersion() (int, error) {
	var v int
	err := j.view(func(tx *bolt.Tx) error {
		var err error
		v, err = readVersion(tx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("journal %s: schema version: %w", j.path, err)
	}
	return v, nil
}

// NodeState returns the persisted node state, decoded with nodestate.Parse.
// Without one it returns an error wrapping ErrNoState.
func (j *Journal) NodeState() (*nodestate.NodeState, error) {
	var b []byte
	err := j.view(func(tx *bolt.Tx) error {
		b = clone(tx.Bucket(bucketState).Get(keyCurrent))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: read node state: %w", j.path, err)
	}
	if b == nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, ErrNoState)
	}
	st, err := nodestate.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("journal %s: state/current: %w", j.path, err)
	}
	return st, nil
}

// PutNodeState validates st and makes it the persisted node state, durably.
// It is refused with an error wrapping ErrTxnOpen while a transaction is
// open: during a transaction the node state changes only by Commit.
func (j *Journal) PutNodeState(st *nodestate.NodeState) error {
	b, err := encodeState(st)
	if err != nil {
		return fmt.Errorf("journal %s: put node state: %w", j.path, err)
	}
	err = j.update(func(tx *bolt.Tx, _ time.Time) error {
		if id := tx.Bucket(bucketOpen).Get(keyOpenTxn); id != nil {
			return fmt.Errorf("%w (%s); it must commit or roll back first", ErrTxnOpen, id)
		}
		return tx.Bucket(bucketState).Put(keyCurrent, b)
	})
	if err != nil {
		return fmt.Errorf("journal %s: put node state: %w", j.path, err)
	}
	return nil
}

func encodeState(st *nodestate.NodeState) ([]byte, error) {
	if st == nil {
		return nil, errors.New("nil node state")
	}
	if err := resolve.Validate(st); err != nil {
		return nil, err
	}
	return st.Marshal()
}

// OpenTxn returns the open transaction, or nil and no error when none is open.
func (j *Journal) OpenTxn() (*Txn, error) {
	var out *Txn
	err := j.view(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketOpen).Get(keyOpenTxn)
		if id == nil {
			return nil
		}
		st, err := getTxn(tx, string(id))
		if err != nil {
			return fmt.Errorf("open/txn names %s: %w", id, err)
		}
		if !st.Phase.Open() {
			return fmt.Errorf("open/txn names %s, whose phase %q is closed: the file is inconsistent", id, st.Phase)
		}
		out = &st.Txn
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: open transaction: %w", j.path, err)
	}
	return out, nil
}

// Txn returns the transaction id, or an error wrapping ErrNoTxn.
func (j *Journal) Txn(id string) (*Txn, error) {
	var out *Txn
	err := j.view(func(tx *bolt.Tx) error {
		st, err := getTxn(tx, id)
		if err != nil {
			return err
		}
		out = &st.Txn
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: transaction %s: %w", j.path, id, err)
	}
	return out, nil
}

// History returns up to limit transactions, newest (last begun) first;
// limit <= 0 means all.
func (j *Journal) History(limit int) ([]Txn, error) {
	var all []storedTxn
	err := j.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTxns).ForEach(func(k, v []byte) error {
			var st storedTxn
			if err := json.Unmarshal(v, &st); err != nil {
				return fmt.Errorf("txns/%s: %w", k, err)
			}
			fromStored(&st.Txn, stateDir(tx))
			all = append(all, st)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: history: %w", j.path, err)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].Seq > all[b].Seq })
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	out := make([]Txn, len(all))
	for i := range all {
		out[i] = all[i].Txn
	}
	return out, nil
}
