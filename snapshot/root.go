package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ciq/stratum-upgrade/durable"
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
func (r *Root) EtcdPath(id string) string { return filepath.Join(r.dir, id+etcdSuffix) }

// List returns the ids of the snapshots present, oldest first (ids sort by
// time). Staging directories and other entries are not listed.
func (r *Root) List() ([]string, error) {
	entries, err := r.entries()
	if err != nil {
		return nil, err
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

// prunedSuffix names a snapshot being pruned: Prune renames "<id>" to
// ".<id>" + prunedSuffix before it removes anything, so a snapshot is either
// whole under its id or hidden under this name.
const prunedSuffix = ".staging-pruned"

// etcdSuffix ends the name of a transaction's etcd data backup.
const etcdSuffix = ".etcd.db"

// pruneHook, when set by tests, runs at each durable point of a prune
// ("renamed": the snapshot is under its trash name, nothing removed yet;
// "etcd-removed": its etcd backup is gone, the trash not yet); an error it
// returns stops the prune there, as a crash would.
var pruneHook func(step, id string) error

// CleanStaging removes the hidden staging directories a crash in the middle
// of Take left for transaction id, and finishes every prune a crash
// interrupted (see Prune), except that it keeps id's own etcd backup. A
// complete snapshot is never touched. The removals are durable when it
// returns.
func (r *Root) CleanStaging(id string) error {
	if err := r.finishPrunes(map[string]bool{id: true}); err != nil {
		return err
	}
	matches, err := filepath.Glob(filepath.Join(r.dir, "."+id+".staging-*"))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.RemoveAll(m); err != nil {
			return fmt.Errorf("remove snapshot staging %s: %w", m, err)
		}
	}
	if len(matches) > 0 {
		if err := durable.SyncDir(r.dir); err != nil {
			return fmt.Errorf("remove snapshot staging: %w", err)
		}
	}
	return nil
}

// finishPrunes completes each prune a crash interrupted: for every
// ".<id>.staging-pruned" in the root it removes the etcd backup "<id>.etcd.db"
// (unless id is in protect, or a snapshot still stands at "<id>") and then
// the trash directory itself, fsyncing the root after each.
func (r *Root) finishPrunes(protect map[string]bool) error {
	entries, err := r.entries()
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, ".") || !strings.HasSuffix(name, prunedSuffix) {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(name, "."), prunedSuffix)
		if id == "" || strings.ContainsAny(id, `/\`) {
			continue
		}
		if !protect[id] && !r.standing(id) {
			if err := r.removeEtcd(id); err != nil {
				return err
			}
		}
		if err := r.removeTrash(id, filepath.Join(r.dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// standing reports whether a snapshot directory stands at "<id>".
func (r *Root) standing(id string) bool {
	fi, err := os.Lstat(r.Path(id))
	return err == nil && fi.IsDir()
}

// removeEtcd removes id's etcd backup, if any, durably.
func (r *Root) removeEtcd(id string) error {
	if _, err := durable.Remove(r.EtcdPath(id)); err != nil {
		return fmt.Errorf("prune etcd backup %s: %w", id, err)
	}
	return nil
}

// removeTrash removes the renamed-away snapshot of id at trash, durably.
func (r *Root) removeTrash(id, trash string) error {
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("prune snapshot %s: %w", id, err)
	}
	if err := durable.SyncDir(r.dir); err != nil {
		return fmt.Errorf("prune snapshot %s: %w", id, err)
	}
	return nil
}

// Prune deletes the oldest snapshots (and their etcd backups) beyond the
// newest keep, never one whose id is in protect (an open transaction's, the
// one `rollback --last` needs). It returns the ids removed.
//
// A snapshot is removed in three durable steps, the snapshots root fsynced
// after each: renamed to ".<id>.staging-pruned" (so a crash never leaves a
// half snapshot under its id), its etcd backup removed, the renamed
// directory removed. Prune (and CleanStaging) first finishes whatever a
// crash interrupted: every ".<id>.staging-pruned" left goes, with the etcd
// backup of its id; and an etcd backup "<id>.etcd.db" whose snapshot no
// longer stands and whose id is not protected (what a prune by an older
// binary left when killed between the two removals) is removed. A snapshot
// standing under its id is only ever removed by the retention count.
func (r *Root) Prune(protect map[string]bool) ([]string, error) {
	if err := r.finishPrunes(protect); err != nil {
		return nil, err
	}
	if err := r.removeOrphanBackups(protect); err != nil {
		return nil, err
	}
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
		trash := filepath.Join(r.dir, "."+id+prunedSuffix)
		if err := os.Rename(r.Path(id), trash); err != nil {
			return removed, fmt.Errorf("prune snapshot %s: %w", id, err)
		}
		if err := durable.SyncDir(r.dir); err != nil {
			return removed, fmt.Errorf("prune snapshot %s: %w", id, err)
		}
		if err := r.hook("renamed", id); err != nil {
			return removed, err
		}
		if err := r.removeEtcd(id); err != nil {
			return removed, err
		}
		if err := r.hook("etcd-removed", id); err != nil {
			return removed, err
		}
		if err := r.removeTrash(id, trash); err != nil {
			return removed, err
		}
		removed = append(removed, id)
		excess--
	}
	return removed, nil
}

func (r *Root) hook(step, id string) error {
	if pruneHook == nil {
		return nil
	}
	return pruneHook(step, id)
}

// removeOrphanBackups removes every regular file "<id>.etcd.db" whose id is
// not protected and has no snapshot standing at "<id>" (a snapshot is always
// taken before its etcd backup, so such a backup belongs to a pruned
// snapshot).
func (r *Root) removeOrphanBackups(protect map[string]bool) error {
	entries, err := r.entries()
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		id, ok := strings.CutSuffix(name, etcdSuffix)
		if !ok || id == "" || strings.HasPrefix(name, ".") || !e.Type().IsRegular() || protect[id] || r.standing(id) {
			continue
		}
		if err := r.removeEtcd(id); err != nil {
			return err
		}
	}
	return nil
}

// entries lists the snapshots root: none when it does not exist yet.
func (r *Root) entries() ([]os.DirEntry, error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot root %s: %w", r.dir, err)
	}
	return entries, nil
}
