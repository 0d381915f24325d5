package kubeapi

// The kubeadm-config update a commit owes the cluster, derived from the
// journal: the last committed transaction that changed the versions owes
// it until the mark in the state directory names it. The mark is written
// only once the update is done, so a crash anywhere (between the commit
// and the update, or in the update) leaves it owed, never lost.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
)

// SyncedFile is the mark's name in the state directory.
const SyncedFile = "kubeadm-config-synced.json"

// Change is a committed transaction that changed the versions kubeadm's
// ClusterConfiguration says, and the versions it committed.
type Change struct {
	Txn      string          `json:"txn"`
	Versions ClusterVersions `json:"versions"`
}

// Mark is the last Change kubeadm-config was brought to (or that owes
// nothing: one committed with the update turned off, or made before the
// mark existed). Txn "" is none.
type Mark struct {
	Change
	At time.Time `json:"at"`
}

// SaveMark writes m to dir, replacing the older mark.
func SaveMark(dir string, m Mark) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if _, err := durable.WriteFile(filepath.Join(dir, SyncedFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("kubeadm-config mark: %w", err)
	}
	return nil
}

// LoadMark is the mark in dir, nil when there is none.
func LoadMark(dir string) (*Mark, error) {
	path := filepath.Join(dir, SyncedFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubeadm-config mark: %w", err)
	}
	var m Mark
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("kubeadm-config mark %s: %w", path, err)
	}
	return &m, nil
}

// Baseline marks last (nil: none) in dir when dir has no mark yet: a new
// node, or a state directory of a binary before the mark, whose commits
// so far owe nothing. It must run before the command's transaction, so
// that this transaction's commit is owed whatever happens after it.
func Baseline(dir string, last *Change) error {
	m, err := LoadMark(dir)
	if err != nil || m != nil {
		return err
	}
	mark := Mark{At: time.Now()}
	if last != nil {
		mark.Change = *last
	}
	return SaveMark(dir, mark)
}

// Owed is the update owed: last, unless it is nil or the mark names it.
// Without a mark nothing is owed (Baseline makes one).
func Owed(dir string, last *Change) (*Change, error) {
	if last == nil {
		return nil, nil
	}
	m, err := LoadMark(dir)
	if err != nil || m == nil || m.Txn == last.Txn {
		return nil, err
	}
	return last, nil
}

// Synced says what Sync did.
type Synced string

// What Sync did.
const (
	// NoneOwed: kubeadm-config was brought to the last change already.
	NoneOwed Synced = "none"
	// Updated: the ClusterConfiguration was written (or already said the
	// versions); the mark names the change.
	Updated Synced = "updated"
	// NotKubeadm: the cluster has no kubeadm-config; the mark names the
	// change.
	NotKubeadm Synced = "not-kubeadm"
	// Deferred: the API server did not answer (or there is none to ask:
	// cs nil); the change stays owed, for the next command.
	Deferred Synced = "deferred"
	// Refused: the API server or the ConfigMap refused the update; the
	// change stays owed, and the error says why.
	Refused Synced = "refused"
)

// Sync does the update owed for last (Owed), when the API server answers
// within ctx, and then marks last in dir. Edited's Notes say what of the
// versions the ClusterConfiguration could not take.
func Sync(ctx context.Context, cs API, dir string, last *Change) (Synced, Edited, error) {
	owed, err := Owed(dir, last)
	if err != nil || owed == nil {
		return NoneOwed, Edited{}, err
	}
	if cs == nil {
		return Deferred, Edited{}, nil
	}
	ed, err := UpdateKubeadmConfig(ctx, cs, owed.Versions)
	var done Synced
	switch {
	case err == nil:
		done = Updated
	case errors.Is(err, ErrNotKubeadm):
		done = NotKubeadm
	case errors.Is(err, ErrClusterConfiguration) || !transient(err):
		return Refused, ed, err
	default:
		return Deferred, ed, err
	}
	if err := SaveMark(dir, Mark{Change: *owed, At: time.Now()}); err != nil {
		return done, ed, fmt.Errorf("kubeadm-config updated, but not marked so (the next command does it again): %w", err)
	}
	return done, ed, nil
}
