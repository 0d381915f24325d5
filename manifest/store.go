package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/proc"
)

// DefaultDir is kubelet's staticPodPath on a kubeadm-style node.
const DefaultDir = "/etc/kubernetes/manifests"

// Modes of what the store writes. Manifests hold no secrets, but nothing but
// kubelet (root) has a reason to read them, and a world-readable manifest
// directory invites the hand edits this package overwrites.
const (
	FileMode fs.FileMode = 0o600
	DirMode  fs.FileMode = 0o700
)

// ErrNoManifest is returned by operations that need a component's manifest
// on disk when there is none.
var ErrNoManifest = errors.New("no manifest")

// ErrUnknownComponent is returned for a name outside Names.
var ErrUnknownComponent = errors.New("unknown component")

// Store is the manifest directory, and the only writer of it. Every write
// goes through one staging path: a hidden file in the directory itself
// (never /tmp, which may be another filesystem), fsynced, renamed over the
// manifest, and the directory fsynced. Bytes already on disk are not
// rewritten, so kubelet sees no event for a no-op.
//
// A Store does no locking of its own: callers serialize writers (the journal
// lock does for stratum-upgrade).
type Store struct {
	dir      string
	readOnly bool
	procs    *proc.Scanner
	log      *slog.Logger
	now      func() time.Time
}

// Options configure a Store. Zero values take the defaults.
type Options struct {
	// Scanner observes the component processes Stop waits on (proc.Host()).
	Scanner *proc.Scanner
	Logger  *slog.Logger
	// Now stamps restarted-at annotations (time.Now).
	Now func() time.Time
}

// Open returns the store over dir, which must be an existing, writable
// directory that is not itself a symlink (kubelet would follow the link;
// stratum would then own a directory it did not name). Nothing is written.
func Open(dir string, opt Options) (*Store, error) {
	dir = filepath.Clean(dir)
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, fmt.Errorf("manifest dir %s: %w", dir, err)
		}
		dir = abs
	}
	if err := durable.CheckDir(dir); err != nil {
		return nil, fmt.Errorf("manifest dir: %w", err)
	}
	s := &Store{dir: dir, procs: opt.Scanner, log: opt.Logger, now: opt.Now}
	if s.procs == nil {
		s.procs = proc.Host()
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// ErrReadOnly is returned by every write of a store opened with OpenReadOnly.
var ErrReadOnly = errors.New("manifest store opened read-only")

// OpenReadOnly returns a store over dir for reading only (plan, status,
// audit): dir must be an existing directory that is not a symlink, and
// nothing in it is created, not even the probe file Open uses to check that
// it is writable. Every write method returns ErrReadOnly.
func OpenReadOnly(dir string, opt Options) (*Store, error) {
	dir, err := filepath.Abs(filepath.Clean(dir))
	if err != nil {
		return nil, fmt.Errorf("manifest dir %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("manifest dir: directory %s does not exist", dir)
	case err != nil:
		return nil, fmt.Errorf("manifest dir %s: %w", dir, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("manifest dir: directory %s %w; point the flag at the real directory", dir, durable.ErrSymlink)
	case !fi.IsDir():
		return nil, fmt.Errorf("manifest dir: %s is not a directory", dir)
	}
	s := &Store{dir: dir, readOnly: true, procs: opt.Scanner, log: opt.Logger, now: opt.Now}
	if s.procs == nil {
		s.procs = proc.Host()
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

func (s *Store) writable(op string) error {
	if s.readOnly {
		return fmt.Errorf("%s in %s: %w", op, s.dir, ErrReadOnly)
	}
	return nil
}

// Create is Open, but first makes dir (mode 0700) and its parents if
// missing. It is for `init` on a node that has never run a control plane.
func Create(dir string, opt Options) (*Store, error) {
	if err := durable.MkdirAll(dir, DirMode); err != nil {
		return nil, dirErr(dir, "cannot create it", err)
	}
	return Open(dir, opt)
}

// Dir is the manifest directory: kubelet's staticPodPath.
func (s *Store) Dir() string { return s.dir }

// Scanner is the process scanner the store waits with.
func (s *Store) Scanner() *proc.Scanner { return s.procs }

// Path is the manifest path of component name. It does not check name.
func (s *Store) Path(name string) string { return filepath.Join(s.dir, FileName(name)) }

func checkName(name string) error {
	if !IsName(name) {
		return fmt.Errorf("%w %q (known: %s)", ErrUnknownComponent, name, strings.Join(Names, ", "))
	}
	return nil
}

// Exists reports whether component name's manifest is on disk: whether this
// node runs the component at all (the rendered files are the on-disk truth).
// A symlink or a directory in its place is an error, not a manifest.
func (s *Store) Exists(name string) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	fi, err := os.Lstat(s.Path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("manifest %s: %w", name, err)
	}
	if err := durable.CheckRegular(s.Path(name), fi); err != nil {
		return false, fmt.Errorf("manifest %s: %w", name, err)
	}
	return true, nil
}

// Read returns the bytes of component name's manifest as kubelet reads them.
// A missing manifest is ErrNoManifest; a symlink is refused, not followed.
func (s *Store) Read(name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	b, _, err := durable.ReadRegular(s.Path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("manifest %s: %w at %s", name, ErrNoManifest, s.Path(name))
	}
	if errors.Is(err, durable.ErrSymlink) {
		p := s.Path(name)
		return nil, &dirError{msg: fmt.Sprintf("manifest %s: %s is a symbolic link, which stratum-upgrade refuses to follow (kubelet follows it, so it runs whatever the link points to): replace the link with a copy of its target (cp --remove-destination \"$(readlink -f %s)\" %s)", name, p, p, p), err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", name, err)
	}
	return b, nil
}

// StrayNote says what kubelet does with stray, an entry of the manifest
// directory that is not a component manifest (see Strays): it runs a file
// (or what a symlink points to) as a pod if it parses as one, and ignores a
// directory (it does not recurse) and anything else that is not a file.
func (s *Store) StrayNote(stray string) string {
	return StrayNote(s.dir, stray)
}

// StrayNote is Store.StrayNote for the manifest directory dir.
func StrayNote(dir, stray string) string {
	p := filepath.Join(dir, stray)
	lfi, err := os.Lstat(p)
	if err != nil {
		return "gone since it was listed"
	}
	fi, err := os.Stat(p) // kubelet follows symlinks
	switch {
	case err != nil && lfi.Mode()&fs.ModeSymlink != 0:
		return "ignored by kubelet: a symbolic link to nothing"
	case err != nil:
		return "unreadable: " + durable.Reason(p, err)
	case fi.IsDir():
		return "ignored by kubelet: a directory (kubelet does not look inside)"
	case !fi.Mode().IsRegular():
		return "ignored by kubelet: not a regular file"
	case lfi.Mode()&fs.ModeSymlink != 0:
		return "a symbolic link: kubelet runs what it points to as a pod if it parses"
	}
	return "kubelet runs it as a pod if it parses"
}

// ReadContainerSpec parses the manifest on disk for component name and
// returns its explicit command, combined argv and declared environment.
// It deliberately reads the FILE rather than re-rendering from node state:
// a re-render would report what stratum intends, and an audit must report
// what kubelet was handed, out-of-band edits included.
func (s *Store) ReadContainerSpec(name string) (ContainerSpec, error) {
	b, err := s.Read(name)
	if err != nil {
		return ContainerSpec{}, err
	}
	pod, err := DecodePod(b)
	if err != nil {
		return ContainerSpec{}, fmt.Errorf("manifest %s: %w", name, err)
	}
	return SpecOf(pod, name)
}
