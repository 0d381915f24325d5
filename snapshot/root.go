package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultRoot is where snapshots live: outside the manifest directory, so
// kubelet never sees them.
const DefaultRoot = "/var/lib/stratum/snapshots"

// Root is the directory that holds one snapshot per transaction id
// ("<root>/<id>/"), and beside it the etcd data backup of that transaction
// when it has one ("<root>/<id>.etcd.db").
type Root struct {
	dir  string
	keep int
}

// NewRoot returns the snapshot root at dir keeping the last keep snapshots
// (keep < 1 keeps one). Nothing is created until a snapshot is taken.
func NewRoot(dir string, keep int) *Root {
	if keep < 1 {
		keep = 1
	}
	return &Root{dir: filepath.Clean(dir), keep: keep}
}

// Dir is the root directory.
func (r *Root) Dir() string { return r.dir }

// Path is the snapshot directory of transaction id.
func (r *Root) Path(id string) string { return filepath.Join(r.dir, id) }

// EtcdPath is the etcd data backup file of transaction id.
func (r *Root) EtcdPath(id string) string { return filepath.Join(r.dir, id+".etcd.db") }

// List returns the ids of the snapshots present, oldest first (ids sort by
// time). Staging directories and other entries are not listed.
func (r *Root) List() ([]string, error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot root %s: %w", r.dir, err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// CleanStaging removes the hidden staging directories a crash in the middle
// of Take left for transaction id. A complete snapshot is never touched.
func (r *Root) CleanStaging(id string) error {
	matches, err := filepath.Glob(filepath.Join(r.dir, "."+id+".staging-*"))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.RemoveAll(m); err != nil {
			return fmt.Errorf("remove snapshot staging %s: %w", m, err)
		}
	}
	return nil
}

// Prune deletes the oldest snapshots (and their etcd backups) beyond the
// newest keep, never one whose id is in protect (an open transaction's). It
// returns the ids removed. A snapshot is removed by renaming it to a hidden
// name first, so a crash mid-removal leaves no half snapshot under its id.
func (r *Root) Prune(protect map[string]bool) ([]string, error) {
	ids, err := r.List()
	if err != nil {
		return nil, err
	}
	var removed []string
	excess := len(ids) - r.keep
	for _, id := range ids {
		if excess <= 0 {
			break
		}
		if protect[id] {
			continue
		}
		trash := filepath.Join(r.dir, "."+id+".staging-pruned")
		if err := os.Rename(r.Path(id), trash); err != nil {
			return removed, fmt.Errorf("prune snapshot %s: %w", id, err)
		}
		if err := os.RemoveAll(trash); err != nil {
			return removed, fmt.Errorf("prune snapshot %s: %w", id, err)
		}
		if err := os.Remove(r.EtcdPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("prune etcd backup %s: %w", id, err)
		}
		removed = append(removed, id)
		excess--
	}
	return removed, nil
}
