package journal

// Paths a transaction keeps under the state directory (the directory of
// the journal file): its snapshot directory (SnapshotDir), the snapshot a
// rollback-last puts back (Source) and the etcd backup (the "path" of the
// EtcdBackup JSON). From schema version 6 they are stored relative to that
// directory and read back joined to wherever the journal is now, so that a
// state directory copied elsewhere (restored from a backup onto another
// path) still names its own snapshots. A path outside the directory stays
// absolute. The journal only translates: the engine still checks every
// path it reads against the one it derives (engine/trust.go), so a stored
// "../x" resolves outside the snapshots and is refused there.

import (
	"encoding/json"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// stateDir is the directory of the journal file tx belongs to.
func stateDir(tx *bolt.Tx) string { return filepath.Dir(tx.DB().Path()) }

// relative is p relative to dir when p is an absolute path inside dir,
// else p.
func relative(dir, p string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return p
	}
	return rel
}

// absolute is p joined to dir when p is relative, else p.
func absolute(dir, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// mapPaths applies f to t's paths under the state directory.
func mapPaths(t *Txn, f func(string) string) {
	t.SnapshotDir = f(t.SnapshotDir)
	t.Source = f(t.Source)
	if len(t.EtcdBackup) == 0 {
		return
	}
	// Opaque to the journal but for its "path"; left alone when it is not
	// a JSON object with a string path (the engine refuses it then).
	var b map[string]json.RawMessage
	var p string
	if json.Unmarshal(t.EtcdBackup, &b) != nil || json.Unmarshal(b["path"], &p) != nil || p == "" {
		return
	}
	np, err := json.Marshal(f(p))
	if err != nil || string(np) == string(b["path"]) {
		return
	}
	b["path"] = np
	if out, err := json.Marshal(b); err == nil {
		t.EtcdBackup = out
	}
}

// toStored makes t's paths relative to dir, as stored.
func toStored(t *Txn, dir string) { mapPaths(t, func(p string) string { return relative(dir, p) }) }

// fromStored makes t's stored paths absolute again, under dir.
func fromStored(t *Txn, dir string) { mapPaths(t, func(p string) string { return absolute(dir, p) }) }

// migrateV5toV6 stores every transaction's paths relative to the state
// directory. A path inside the journal's directory becomes relative to
// it. One outside it whose parent is named snapshots is the standard
// layout of a state directory that was moved before this migration
// (<old state dir>/snapshots/<name>): it becomes snapshots/<name>, which
// is where the engine looks for it now. Any other path stays absolute,
// and the engine refuses it as before.
func migrateV5toV6(tx *bolt.Tx) error {
	dir := stateDir(tx)
	txns := tx.Bucket(bucketTxns)
	type kv struct{ k, v []byte }
	var out []kv
	err := txns.ForEach(func(k, v []byte) error {
		var st storedTxn
		if err := json.Unmarshal(v, &st); err != nil {
			return err
		}
		mapPaths(&st.Txn, func(p string) string {
			if r := relative(dir, p); r != p || !filepath.IsAbs(p) {
				return r
			}
			if filepath.Base(filepath.Dir(p)) == "snapshots" {
				return filepath.Join("snapshots", filepath.Base(p))
			}
			return p
		})
		nv, err := json.Marshal(&st)
		if err != nil {
			return err
		}
		out = append(out, kv{clone(k), nv})
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range out {
		if err := txns.Put(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}
