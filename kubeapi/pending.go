package kubeapi

// The kubeadm-config update a commit owes the cluster, recorded in the
// state directory until a command finds the API server up and does it.

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

// PendingFile is the record's name in the state directory.
const PendingFile = "kubeadm-config-pending.json"

// Pending is a kubeadm-config update not yet done.
type Pending struct {
	// Txn is the transaction whose commit made it.
	Txn      string          `json:"txn"`
	Versions ClusterVersions `json:"versions"`
	Recorded time.Time       `json:"recorded"`
}

// SavePending records p in dir, replacing an older record: the newest
// commit's versions are the ones the cluster runs.
func SavePending(dir string, p Pending) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if _, err := durable.WriteFile(filepath.Join(dir, PendingFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("kubeadm-config update record: %w", err)
	}
	return nil
}

// LoadPending is the record in dir, nil when there is none.
func LoadPending(dir string) (*Pending, error) {
	path := filepath.Join(dir, PendingFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubeadm-config update record: %w", err)
	}
	var p Pending
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("kubeadm-config update record %s: %w", path, err)
	}
	return &p, nil
}

// Synced says what Sync did.
type Synced string

// What Sync did.
const (
	// NoneOwed: no update was recorded.
	NoneOwed Synced = "none"
	// Updated: the ClusterConfiguration was written (or already said the
	// versions); the record is gone.
	Updated Synced = "updated"
	// NotKubeadm: the cluster has no kubeadm-config; the record is gone.
	NotKubeadm Synced = "not-kubeadm"
	// Deferred: the API server did not answer (or there is none to ask:
	// cs nil); the record stays for the next command.
	Deferred Synced = "deferred"
	// Refused: the API server or the ConfigMap refused the update; the
	// record stays, and the error says why.
	Refused Synced = "refused"
)

// Sync does the update recorded in dir, if any, when the API server
// answers within ctx, and removes the record once done. Edited's Notes
// say what of the versions the ClusterConfiguration could not take.
func Sync(ctx context.Context, cs API, dir string) (Synced, Edited, error) {
	p, err := LoadPending(dir)
	if err != nil || p == nil {
		return NoneOwed, Edited{}, err
	}
	if cs == nil {
		return Deferred, Edited{}, nil
	}
	ed, err := UpdateKubeadmConfig(ctx, cs, p.Versions)
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
	if _, err := durable.Remove(filepath.Join(dir, PendingFile)); err != nil {
		return done, ed, fmt.Errorf("kubeadm-config updated, but its record stays: %w", err)
	}
	return done, ed, nil
}
