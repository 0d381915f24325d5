// Package snapshot takes and restores copies of a node's manifest set: every
// component manifest of the manifest directory plus the render-derived files.
//
// A snapshot is complete or absent. It is staged under a hidden name beside
// its final directory, every file and directory fsynced, and renamed into
// place only when every copy succeeded; an existing snapshot is never
// retaken. A restore validates the whole snapshot before anything moves.
//
// Layout of a snapshot directory (format version 1):
//
//	<dir>/index.json             what the snapshot holds: one entry per file
//	<dir>/manifests/<name>.yaml  component manifests, as they were on disk
//	<dir>/derived/<base name>    render-derived files; index.json records
//	                             the live path each one goes back to
//
// Every file's mode, size and sha256 are recorded in the index, so a file
// that was changed, truncated or removed after the snapshot was taken is
// detected, and a file that is not in the index is a stray: reported and
// restored nowhere.
package snapshot

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/manifest"
)

// FormatVersion is the snapshot layout this package writes and reads.
const FormatVersion = 1

const (
	indexFile    = "index.json"
	manifestsDir = "manifests"
	derivedDir   = "derived"
)

// ErrExists is returned by Take when a snapshot is already at dir. The
// caller that keeps an existing snapshot for its own resume semantics (the
// upgrade engine) tests for it with errors.Is.
var ErrExists = errors.New("snapshot already exists")

// Store is the manifest directory as a snapshot needs it: where the
// manifests are, and the sole writer's staging path for putting them back.
// *manifest.Store satisfies it.
type Store interface {
	Dir() string
	Path(name string) string
	Sweep() (manifest.SweepResult, error)
	PutMode(name string, b []byte, perm fs.FileMode) (changed bool, err error)
	Remove(name string) (removed bool, err error)
}

// ErrInvalid wraps every reason a snapshot is refused by Validate or Restore.
var ErrInvalid = errors.New("invalid snapshot")

// Kinds of files a snapshot holds.
const (
	KindManifest = "manifest"
	KindDerived  = "derived"
)

// Entry is one file of a snapshot.
type Entry struct {
	Kind string `json:"kind"` // KindManifest or KindDerived
	// Name is the file's base name inside the snapshot: "<component>.yaml"
	// for a manifest, the live file's base name for a derived file.
	Name string `json:"name"`
	// Component is the manifest's component (manifests only).
	Component string `json:"component,omitempty"`
	// LivePath is where a derived file goes back to (derived only).
	LivePath string      `json:"livePath,omitempty"`
	Mode     fs.FileMode `json:"mode"`
	Size     int64       `json:"size"`
	SHA256   string      `json:"sha256"`
}

// Index is the content of index.json.
type Index struct {
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	// ManifestDir is the directory the manifests were copied from.
	ManifestDir string  `json:"manifestDir"`
	Entries     []Entry `json:"entries"`
}

// Manifests returns the manifest entries, in the order of manifest.Names.
func (ix *Index) Manifests() []Entry {
	var out []Entry
	for _, n := range manifest.Names {
		for _, e := range ix.Entries {
			if e.Kind == KindManifest && e.Component == n {
				out = append(out, e)
			}
		}
	}
	return out
}

// Take copies the manifest set into dir, which it creates: every component
// manifest in store's directory ("<name>.yaml" for a name of manifest.Names),
// plus each derived file of derivedPaths that exists. Staging leftovers and
// anything else in the manifest directory stay out: a file that joined a
// snapshot would be restored as a pod on every later restore.
//
// The set lands complete or not at all: it is staged under a hidden name
// beside dir, every file and directory fsynced, and renamed to dir only once
// every copy succeeded; the parent is fsynced after the rename. On error
// nothing is left at dir and the staging directory is removed. A snapshot
// already at dir is not retaken: ErrExists. A symlink or non-regular file
// where a manifest or derived file belongs fails the snapshot.
func Take(dir string, store Store, derivedPaths []string) (*Index, error) {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if _, err := os.Lstat(dir); err == nil {
		// Taken before a crash that may have come before the rename was
		// made durable: make it durable now.
		if err := durable.SyncDir(parent); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", dir, err)
		}
		return nil, fmt.Errorf("snapshot %s: %w", dir, ErrExists)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if err := durable.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	staging := filepath.Join(parent, "."+filepath.Base(dir)+".staging-"+randHex(4))
	ix, err := stage(staging, store, derivedPaths)
	if err != nil {
		os.RemoveAll(staging)
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	// A snapshot that Restore would refuse is worse than none: it would
	// only be found out in the middle of a rollback. So the staged copy
	// passes the very checks a restore makes before it becomes a snapshot.
	if _, err := Load(staging, derivedPaths); err != nil {
		os.RemoveAll(staging)
		return nil, fmt.Errorf("snapshot %s: the manifest set cannot be snapshotted, a rollback could not put it back: %w", dir, err)
	}
	if err := os.Rename(staging, dir); err != nil {
		os.RemoveAll(staging)
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if err := durable.SyncDir(parent); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	return ix, nil
}

// copyHook, when set by tests, runs before each file copy; an error it
// returns fails the copy (injected mid-snapshot failure).
var copyHook func(name string) error

func stage(staging string, store Store, derivedPaths []string) (*Index, error) {
	for _, d := range []string{staging, filepath.Join(staging, manifestsDir), filepath.Join(staging, derivedDir)} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	ix := &Index{Version: FormatVersion, Created: time.Now().UTC(), ManifestDir: store.Dir()}
	for _, name := range manifest.Names {
		src := store.Path(name)
		e, err := copyIn(src, filepath.Join(staging, manifestsDir), manifest.FileName(name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", name, err)
		}
		e.Kind, e.Component = KindManifest, name
		ix.Entries = append(ix.Entries, e)
	}
	seen := map[string]string{}
	for _, p := range derivedPaths {
		base := filepath.Base(p)
		if other, dup := seen[base]; dup {
			return nil, fmt.Errorf("derived files %s and %s share a base name", other, p)
		}
		seen[base] = p
		e, err := copyIn(p, filepath.Join(staging, derivedDir), base)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("derived file %s: %w", p, err)
		}
		e.Kind, e.LivePath = KindDerived, p
		ix.Entries = append(ix.Entries, e)
	}
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeSynced(filepath.Join(staging, indexFile), b, 0o600); err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(staging, manifestsDir), filepath.Join(staging, derivedDir), staging} {
		if err := durable.SyncDir(d); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

// copyIn copies regular file src to dstDir/name, fsynced, with src's mode.
func copyIn(src, dstDir, name string) (Entry, error) {
	b, mode, err := durable.ReadRegular(src)
	if err != nil {
		return Entry{}, err
	}
	if copyHook != nil {
		if err := copyHook(name); err != nil {
			return Entry{}, err
		}
	}
	if err := writeSynced(filepath.Join(dstDir, name), b, mode); err != nil {
		return Entry{}, err
	}
	sum := sha256.Sum256(b)
	return Entry{Name: name, Mode: mode, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, nil
}

func writeSynced(path string, b []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil { // umask must not change the recorded mode
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Loaded is a validated snapshot held in memory.
type Loaded struct {
	Dir   string
	Index Index
	// Data holds each entry's bytes, by Entry.Name within its kind.
	manifests map[string][]byte // component -> bytes
	derived   map[string][]byte // live path -> bytes
	// Strays are files in the snapshot that are not in its index (relative
	// paths): they are restored nowhere.
	Strays []string
}

// Manifest returns the snapshotted bytes of component name's manifest.
func (l *Loaded) Manifest(name string) ([]byte, bool) {
	b, ok := l.manifests[name]
	return b, ok
}

// Load reads and validates the snapshot at dir without changing anything:
// the index parses and has this package's version; no entry anywhere is a
// symlink; every index entry names an allowed file (a manifest
// "<component>.yaml" of manifest.Names, or a derived file whose live path is
// one of allowedDerived) without path separators or traversal; every entry's
// file exists as a regular file with the recorded size and sha256; and every
// manifest decodes as a Pod of its component. Files present but not in the
// index are strays (reported in Strays); a directory where a file belongs,
// or any symlink, fails the load. All errors wrap ErrInvalid.
func Load(dir string, allowedDerived []string) (*Loaded, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("snapshot %s: %w: %s", dir, ErrInvalid, fmt.Sprintf(format, a...))
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	if !fi.IsDir() {
		what := "a file"
		if fi.Mode()&fs.ModeSymlink != 0 {
			what = "a symbolic link"
		}
		return nil, bad("not a directory: it is %s", what)
	}
	raw, _, err := durable.ReadRegular(filepath.Join(dir, indexFile))
	if err != nil {
		return nil, bad("index: %v", err)
	}
	var ix Index
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ix); err != nil {
		return nil, bad("index %s does not parse: %v", indexFile, err)
	}
	if ix.Version != FormatVersion {
		return nil, bad("format version %d, this binary reads %d", ix.Version, FormatVersion)
	}
	allowed := map[string]bool{}
	for _, p := range allowedDerived {
		allowed[p] = true
	}
	l := &Loaded{Dir: dir, Index: ix, manifests: map[string][]byte{}, derived: map[string][]byte{}}
	listed := map[string]bool{indexFile: true}
	for _, e := range ix.Entries {
		if e.Name == "" || e.Name != filepath.Base(e.Name) || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, `/\`) {
			return nil, bad("entry name %q is not a plain file name", e.Name)
		}
		var rel string
		switch e.Kind {
		case KindManifest:
			comp, ok := manifest.ManifestName(e.Name)
			if !ok || comp != e.Component {
				return nil, bad("manifest entry %q is not <component>.yaml of a known component", e.Name)
			}
			if _, dup := l.manifests[comp]; dup {
				return nil, bad("manifest %s listed twice", comp)
			}
			rel = filepath.Join(manifestsDir, e.Name)
		case KindDerived:
			if !allowed[e.LivePath] || filepath.Base(e.LivePath) != e.Name {
				return nil, bad("derived entry %q goes to %q, which is not a derived file of this node", e.Name, e.LivePath)
			}
			rel = filepath.Join(derivedDir, e.Name)
		default:
			return nil, bad("entry %q has unknown kind %q", e.Name, e.Kind)
		}
		if listed[rel] {
			return nil, bad("entry %s listed twice", rel)
		}
		listed[rel] = true
		b, mode, err := durable.ReadRegular(filepath.Join(dir, rel))
		if err != nil {
			return nil, bad("%s: %v", rel, err)
		}
		sum := sha256.Sum256(b)
		if int64(len(b)) != e.Size || hex.EncodeToString(sum[:]) != e.SHA256 {
			return nil, bad("%s does not match its index entry (size %d, want %d): changed after the snapshot was taken", rel, len(b), e.Size)
		}
		if mode != e.Mode.Perm() {
			return nil, bad("%s has mode %v, index says %v", rel, mode, e.Mode.Perm())
		}
		if e.Kind == KindManifest {
			pod, err := manifest.DecodePod(b)
			if err != nil {
				return nil, bad("%s: %v", rel, err)
			}
			if got := pod.Labels["component"]; got != e.Component {
				return nil, bad("%s is a pod of component %q, not %q", rel, got, e.Component)
			}
			l.manifests[e.Component] = b
		} else {
			l.derived[e.LivePath] = b
		}
	}
	// Everything present must be listed, a directory only where one belongs,
	// and no symlink anywhere.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "." {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return bad("%s is a symbolic link", rel)
		}
		if d.IsDir() {
			if rel == manifestsDir || rel == derivedDir {
				return nil
			}
			if listed[rel] {
				return bad("%s is a directory where a file belongs", rel)
			}
			l.Strays = append(l.Strays, rel+"/")
			return fs.SkipDir
		}
		if !listed[rel] {
			l.Strays = append(l.Strays, rel)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrInvalid) {
			return nil, err
		}
		return nil, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	sort.Strings(l.Strays)
	return l, nil
}

// RestoreResult says what Restore did.
type RestoreResult struct {
	Written []string // components whose manifest changed back
	Removed []string // components that had a manifest the snapshot does not
	Derived []string // derived files written back
	// DerivedRemoved are derived files the snapshot does not hold, removed.
	DerivedRemoved []string
	Swept          []string // staging leftovers swept from the live directory
	// ManifestStrays are the entries of the live manifest directory that are
	// not ours (manifest.SweepResult.Strays): reported, left alone.
	ManifestStrays []string
	Strays         []string // files in the snapshot restored nowhere
}

// Restore puts the snapshot at dir back where the render keeps it, after
// Load has validated all of it (a bad snapshot is refused before anything
// moves). It sweeps the visible staging leftovers from the live manifest
// directory, writes every derived file back to its live path and every
// manifest through the store's one staging path, each with the mode the
// snapshot holds, and removes the manifests and derived files the snapshot
// does not hold (a component the failed upgrade added), so the live set
// equals the snapshot. Strays in the snapshot land nowhere and are reported.
// Every write is atomic and durable and bytes already in place are not
// rewritten, so a restore run twice writes nothing the second time.
func Restore(dir string, store Store, allowedDerived []string) (RestoreResult, error) {
	return RestoreStamped(dir, store, allowedDerived, nil)
}

// RestoreStamped is Restore, except that the manifest of each component in
// stamps is written with its restarted-at annotation set to that stamp
// (manifest.SetRestartedAt): one write that both puts the snapshot back and
// gives the pod a UID kubelet has not terminated before. Called again with
// the same stamps it writes nothing.
func RestoreStamped(dir string, store Store, allowedDerived []string, stamps map[string]string) (RestoreResult, error) {
	var res RestoreResult
	l, err := Load(dir, allowedDerived)
	if err != nil {
		return res, err
	}
	res.Strays = l.Strays
	sw, err := store.Sweep()
	if err != nil {
		return res, fmt.Errorf("restore %s: %w", dir, err)
	}
	res.Swept, res.ManifestStrays = sw.Swept, sw.Strays
	for _, e := range l.Index.Entries {
		if e.Kind != KindDerived {
			continue
		}
		changed, err := manifest.WriteDerived(manifest.DerivedFile{Path: e.LivePath, Data: l.derived[e.LivePath], Mode: e.Mode.Perm()})
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", dir, err)
		}
		if changed {
			res.Derived = append(res.Derived, e.LivePath)
		}
	}
	for _, p := range allowedDerived {
		if _, held := l.derived[p]; held {
			continue
		}
		removed, err := durable.Remove(p)
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", dir, err)
		}
		if removed {
			res.DerivedRemoved = append(res.DerivedRemoved, p)
		}
	}
	for _, e := range l.Index.Manifests() {
		b := l.manifests[e.Component]
		if stamp, ok := stamps[e.Component]; ok {
			if b, err = manifest.SetRestartedAt(b, stamp); err != nil {
				return res, fmt.Errorf("restore %s: %s: %w", dir, e.Component, err)
			}
		}
		changed, err := store.PutMode(e.Component, b, e.Mode.Perm())
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", dir, err)
		}
		if changed {
			res.Written = append(res.Written, e.Component)
		}
	}
	for _, name := range manifest.Names {
		if _, held := l.manifests[name]; held {
			continue
		}
		removed, err := store.Remove(name)
		if err != nil {
			return res, fmt.Errorf("restore %s: %w", dir, err)
		}
		if removed {
			res.Removed = append(res.Removed, name)
		}
	}
	return res, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return hex.EncodeToString(b)
}
