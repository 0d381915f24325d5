// The manifest directory the journal manages: ManifestDir, PutManifestDir.

package journal

import (
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// keyManifestDir is state/manifest_dir: the absolute path of the manifest
// directory this journal's node state is rendered into. See schema.go.
var keyManifestDir = []byte("manifest_dir")

// ManifestDir returns the manifest directory recorded in the journal, or ""
// when none is (a journal written before the directory was recorded).
func (j *Journal) ManifestDir() (string, error) {
	var dir string
	err := j.view(func(tx *bolt.Tx) error {
		dir = string(tx.Bucket(bucketState).Get(keyManifestDir))
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("journal %s: read manifest dir: %w", j.path, err)
	}
	return dir, nil
}

// PutManifestDir records dir, which must be an absolute, clean path, as
// the manifest directory the journal manages, durably. Like PutNodeState it
// is refused with an error wrapping ErrTxnOpen while a transaction is open:
// a transaction's snapshot and writes belong to one directory.
func (j *Journal) PutManifestDir(dir string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("journal %s: put manifest dir: %q is not an absolute, clean path", j.path, dir)
	}
	err := j.update(func(tx *bolt.Tx, _ time.Time) error {
		if id := tx.Bucket(bucketOpen).Get(keyOpenTxn); id != nil {
			return fmt.Errorf("%w (%s); it must commit or roll back first", ErrTxnOpen, id)
		}
		return tx.Bucket(bucketState).Put(keyManifestDir, []byte(dir))
	})
	if err != nil {
		return fmt.Errorf("journal %s: put manifest dir: %w", j.path, err)
	}
	return nil
}
