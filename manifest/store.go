package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
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

// Staging leftovers. An older writer that was not atomic wrote a visible
// "<name>.yaml.tmp" (or os.CreateTemp's "<name>.yaml.tmp<digits>"),
// "<name>.yaml.new", or an editor-style "<name>.yaml~" next to the manifest
// and renamed it. kubelet parses every visible file as a pod, and these sort
// AFTER "<name>.yaml", so one left behind by a crash wins that pod's store key
// at every relist and runs a half-written or stale pod. They are swept before
// every write, when they are regular files (see Sweep). The hidden ".<name>.yaml<digits>" files are renameio's own
// staging files: kubelet ignores hidden files, but one survives only a crash
// mid-write, and it is swept too so a converged directory holds nothing else.
// Any other visible file is not ours: it is reported, never deleted.
var (
	visibleLeftover = regexp.MustCompile(`^(` + strings.Join(quoteAll(Names), "|") + `)\.yaml(\.tmp[0-9]*|\.new|~)$`)
	hiddenLeftover  = regexp.MustCompile(`^\.(` + strings.Join(quoteAll(Names), "|") + `)\.yaml[0-9]+$`)
)

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = regexp.QuoteMeta(v)
	}
	return out
}

// IsStagingLeftover reports whether file, a base name in the manifest
// directory, is a staging leftover this package sweeps (see the patterns
// above), and whether kubelet sees it (visible).
func IsStagingLeftover(file string) (leftover, visible bool) {
	switch {
	case visibleLeftover.MatchString(file):
		return true, true
	case hiddenLeftover.MatchString(file):
		return true, false
	}
	return false, false
}

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
		return nil, fmt.Errorf("manifest dir %s: %w", dir, err)
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
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", name, err)
	}
	return b, nil
}

// Put writes b as component name's manifest, exactly as given, through the
// one staging path. It is for putting back a manifest read earlier, where a
// re-render would take its images from this binary rather than from what was
// running. b must decode as a Pod (kubelet would otherwise drop the pod at
// its next relist); on any error the manifest on disk is unchanged. Visible
// staging leftovers of name are swept first. changed is false when the file
// already held b.
func (s *Store) Put(name string, b []byte) (changed bool, err error) {
	return s.PutMode(name, b, FileMode)
}

// PutMode is Put with file mode perm instead of FileMode: a snapshot
// restore puts a manifest back with the mode it was taken with.
func (s *Store) PutMode(name string, b []byte, perm fs.FileMode) (changed bool, err error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	if _, err := DecodePod(b); err != nil {
		return false, fmt.Errorf("put manifest %s: refusing bytes that are not a pod: %w", name, err)
	}
	if _, err := s.Sweep(); err != nil {
		return false, err
	}
	return s.writeMode(name, b, perm)
}

// Remove deletes component name's manifest durably without waiting for the
// process (Stop waits). An absent manifest is not an error (removed false);
// a symlink or directory in its place is refused.
func (s *Store) Remove(name string) (removed bool, err error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	if err := s.writable("remove manifest " + name); err != nil {
		return false, err
	}
	if err := checkTarget(s.Path(name)); err != nil {
		return false, fmt.Errorf("manifest %s: %w", name, err)
	}
	removed, err = durable.Remove(s.Path(name))
	if err != nil {
		return false, fmt.Errorf("manifest %s: %w", name, err)
	}
	if removed {
		s.log.Info("manifest removed", "component", name)
	}
	return removed, nil
}

func (s *Store) write(name string, b []byte) (bool, error) { return s.writeMode(name, b, FileMode) }

func (s *Store) writeMode(name string, b []byte, perm fs.FileMode) (bool, error) {
	if err := s.writable("write manifest " + name); err != nil {
		return false, err
	}
	if err := checkTarget(s.Path(name)); err != nil {
		return false, fmt.Errorf("manifest %s: %w", name, err)
	}
	changed, err := durable.WriteFile(s.Path(name), b, perm)
	if err != nil {
		return false, fmt.Errorf("manifest %s: %w", name, err)
	}
	if changed {
		s.log.Info("manifest written", "component", name, "path", s.Path(name), "bytes", len(b))
	}
	return changed, nil
}

// WriteResult says what WriteAll did.
type WriteResult struct {
	Written   []string // components whose manifest bytes changed, in roster order
	Unchanged []string // components whose manifest already held the render
	Removed   []string // manifests of components that left the roster
	Derived   []string // derived files written (absolute paths)
	Swept     []string // staging leftovers removed (base names)
	Strays    []string // visible files that are not ours (left alone)
}

// WriteAll makes the manifest directory hold exactly the render of st: it is
// what runs on controller start, so it is idempotent and overwrites hand
// edits by design. It first renders everything and checks every target (an
// unknown component, a render error, or a symlink where a manifest belongs
// fails the call before anything is written); then it sweeps staging
// leftovers, writes the derived files (before the manifests, since
// kube-apiserver reads them only when it starts), writes each roster
// manifest in start order, and removes the manifest of any component that
// left the roster (kube-vip when the VIP is dropped). Each manifest keeps the
// restarted-at annotation it has on disk: only Restart and RestartAsIs change
// it. Every write is atomic and durable; a second call with the same state
// writes nothing. On error, files already written stay written (each one is
// whole), and the error names the one that failed.
func (s *Store) WriteAll(st *nodestate.NodeState) (WriteResult, error) {
	var res WriteResult
	if err := s.writable("write all manifests"); err != nil {
		return res, err
	}
	prof, err := LoadProfile(st)
	if err != nil {
		return res, err
	}
	derived, err := DerivedFiles(st, prof)
	if err != nil {
		return res, err
	}
	roster := NamesFor(st)
	rendered := make(map[string][]byte, len(roster))
	for _, name := range roster {
		stamp, err := s.RestartedAtOnDisk(name)
		if err != nil {
			return res, err
		}
		b, err := RenderBytes(st, prof, name, stamp)
		if err != nil {
			return res, err
		}
		rendered[name] = b
	}
	var leaving []string
	for _, name := range Names {
		if _, in := rendered[name]; in {
			continue
		}
		ok, err := s.Exists(name)
		if err != nil {
			return res, err
		}
		if ok {
			leaving = append(leaving, name)
		}
	}
	for _, d := range derived {
		if err := checkTarget(d.Path); err != nil {
			return res, err
		}
	}

	sw, err := s.Sweep()
	if err != nil {
		return res, err
	}
	res.Swept, res.Strays = sw.Swept, sw.Strays
	for _, d := range derived {
		changed, err := writeDerived(d)
		if err != nil {
			return res, err
		}
		if changed {
			res.Derived = append(res.Derived, d.Path)
		}
	}
	for _, name := range roster {
		changed, err := s.write(name, rendered[name])
		if err != nil {
			return res, err
		}
		if changed {
			res.Written = append(res.Written, name)
		} else {
			res.Unchanged = append(res.Unchanged, name)
		}
	}
	for _, name := range leaving {
		if _, err := durable.Remove(s.Path(name)); err != nil {
			return res, fmt.Errorf("manifest %s: %w", name, err)
		}
		s.log.Info("manifest removed: component left the roster", "component", name)
		res.Removed = append(res.Removed, name)
	}
	return res, nil
}

// checkTarget refuses a symlink or non-regular file where a file is about to
// be written.
func checkTarget(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	return durable.CheckRegular(path, fi)
}

// WriteDerived writes one render-derived file through the same atomic,
// durable path as a manifest, creating its directory (0700) if missing.
func writeDerived(d DerivedFile) (bool, error) {
	if err := durable.MkdirAll(filepath.Dir(d.Path), DirMode); err != nil {
		return false, fmt.Errorf("derived file %s: %w", d.Path, err)
	}
	changed, err := durable.WriteFile(d.Path, d.Data, d.Mode)
	if err != nil {
		return false, fmt.Errorf("derived file: %w", err)
	}
	return changed, nil
}

// WriteDerived is writeDerived for callers outside the package (a snapshot
// restore puts derived files back at their live path through it).
func WriteDerived(d DerivedFile) (changed bool, err error) { return writeDerived(d) }

// RestartedAtOnDisk is the restarted-at annotation of the manifest on disk,
// or "" when there is none, or the file does not decode (a hand edit that
// broke it is overwritten anyway).
func (s *Store) RestartedAtOnDisk(name string) (string, error) {
	if err := checkTarget(s.Path(name)); err != nil {
		return "", fmt.Errorf("manifest %s: %w", name, err)
	}
	b, _, err := durable.ReadRegular(s.Path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("manifest %s: %w", name, err)
	}
	pod, err := DecodePod(b)
	if err != nil {
		s.log.Warn("manifest on disk does not decode; it will be overwritten", "component", name, "err", err)
		return "", nil
	}
	return RestartedAt(pod), nil
}

// SweepResult says what Sweep found.
type SweepResult struct {
	Swept  []string // staging leftovers removed
	Strays []string // other entries that are not manifests of ours, left alone
}

// Sweep removes the staging leftovers (see IsStagingLeftover) from the
// manifest directory and reports every other visible entry that is not a
// component manifest as a stray, logged as a warning: kubelet runs any
// visible file as a pod, so an operator must see it, but it is not ours to
// delete. Only regular files are ever removed, and only by unlink(2), which
// never removes a directory: an entry named like a leftover that is a
// directory, fifo, socket or symlink is reported as a stray (when visible;
// hidden, it is ignored like every hidden entry) and left exactly as it is,
// and it never fails the sweep. The removals are durable when Sweep returns.
func (s *Store) Sweep() (SweepResult, error) {
	var res SweepResult
	if err := s.writable("sweep"); err != nil {
		return res, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return res, fmt.Errorf("manifest dir %s: %w", s.dir, err)
	}
	var retake []string
	for _, e := range entries {
		name := e.Name()
		if _, ok := ManifestName(name); ok {
			continue
		}
		if leftover, visible := IsStagingLeftover(name); leftover {
			if !e.Type().IsRegular() {
				// Named like a leftover, but no writer of ours leaves
				// anything but a regular file: a directory, fifo, socket
				// or symlink is someone else's. kubelet ignores all but a
				// symlink (it follows that one), so it is a stray like any
				// other visible entry that is not ours; a hidden one is
				// ignored like every hidden entry.
				if visible {
					s.log.Warn("entry in the manifest directory is named like a staging leftover but is not a regular file; left alone", "file", name, "type", e.Type().String())
					res.Strays = append(res.Strays, name)
				}
				continue
			}
			switch err := unlinkFile(filepath.Join(s.dir, name)); {
			case errors.Is(err, fs.ErrNotExist):
			case errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EPERM):
				// Replaced by a directory since it was listed (unlink
				// never removes one): a stray, as above.
				if visible {
					res.Strays = append(res.Strays, name)
				}
				continue
			case err != nil:
				return res, fmt.Errorf("sweep staging leftover %s: %w", filepath.Join(s.dir, name), err)
			}
			s.log.Warn("swept staging leftover from the manifest directory", "file", name, "visibleToKubelet", visible)
			res.Swept = append(res.Swept, name)
			if visible {
				comp, _, _ := strings.Cut(name, ".yaml")
				retake = append(retake, comp)
			}
			continue
		}
		if strings.HasPrefix(name, ".") {
			continue // kubelet ignores hidden files, and so do we
		}
		s.log.Warn("file in the manifest directory is not a stratum manifest; kubelet runs it as a pod if it parses", "file", name)
		res.Strays = append(res.Strays, name)
	}
	if len(res.Swept) > 0 {
		if err := durable.SyncDir(s.dir); err != nil {
			return res, err
		}
	}
	// A visible leftover may have held its component's pod key (it sorts
	// after the manifest); kubelet deletes that key when the leftover goes
	// and would not run the real manifest again until its next relist, up
	// to 20 s later. Touching the manifest sends kubelet an attribute event
	// that makes it parse the file again at once. The bytes do not change.
	for _, comp := range retake {
		if checkTarget(s.Path(comp)) != nil {
			continue // a symlink is never followed; the write that follows refuses it
		}
		now := s.now()
		if err := os.Chtimes(s.Path(comp), now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return res, fmt.Errorf("sweep: touch %s so kubelet takes its pod back: %w", s.Path(comp), err)
		}
	}
	return res, nil
}

// unlinkFile removes path with unlink(2), which removes a file, symlink,
// fifo or socket but never a directory (os.Remove falls back to rmdir).
func unlinkFile(path string) error {
	if err := syscall.Unlink(path); err != nil {
		return &fs.PathError{Op: "unlink", Path: path, Err: err}
	}
	return nil
}

// Strays lists the visible entries of the manifest directory that are not
// component manifests, without changing anything: the strays a Sweep
// reports, plus any regular-file staging leftover a Sweep would remove.
func (s *Store) Strays() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("manifest dir %s: %w", s.dir, err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if _, ok := ManifestName(name); ok || strings.HasPrefix(name, ".") {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// Start renders component name's manifest from st (keeping the restarted-at
// it has on disk, if any) and writes it, with its derived files first when
// it is kube-apiserver. A component outside st's roster is an error.
func (s *Store) Start(st *nodestate.NodeState, name string) error {
	stamp, err := s.RestartedAtOnDisk(name)
	if err != nil {
		return err
	}
	_, err = s.render(st, name, stamp)
	return err
}

// render writes name's manifest rendered from st with restarted-at stamp.
func (s *Store) render(st *nodestate.NodeState, name, stamp string) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	prof, err := LoadProfile(st)
	if err != nil {
		return false, err
	}
	b, err := RenderBytes(st, prof, name, stamp)
	if err != nil {
		return false, err
	}
	if name == nodestate.KubeAPIServer {
		derived, err := DerivedFiles(st, prof)
		if err != nil {
			return false, err
		}
		for _, d := range derived {
			if _, err := writeDerived(d); err != nil {
				return false, err
			}
		}
	}
	if _, err := s.Sweep(); err != nil {
		return false, err
	}
	return s.write(name, b)
}

// Stop removes component name's manifest and waits until no process of the
// component is left, so a caller about to do something destructive (move
// etcd's data dir aside) knows the old process no longer serves or holds
// host state. kube-vip has no listener, but its process must still exit. The
// removal is durable before the wait begins; on timeout the manifest stays
// removed and the error lists the surviving pids. A missing manifest is not
// an error: Stop then only waits.
func (s *Store) Stop(ctx context.Context, st *nodestate.NodeState, name string, timeout time.Duration) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.writable("stop " + name); err != nil {
		return err
	}
	t, err := Target(st, name)
	if err != nil {
		return err
	}
	if err := checkTarget(s.Path(name)); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	removed, err := durable.Remove(s.Path(name))
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	if removed {
		s.log.Info("manifest removed to stop component", "component", name)
	}
	if err := s.procs.WaitGone(ctx, t, timeout); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// Restart re-renders component name from st with a restarted-at annotation
// of now, so kubelet sees a content change and recreates the pod. It returns
// the stamp written.
func (s *Store) Restart(st *nodestate.NodeState, name string) (stamp string, err error) {
	stamp = s.Stamp()
	if _, err := s.render(st, name, stamp); err != nil {
		return "", err
	}
	return stamp, nil
}

// Stamp is a fresh restarted-at value: the current time, UTC, RFC 3339 with
// nanoseconds (so two restarts in one second still differ).
func (s *Store) Stamp() string { return s.now().UTC().Format(time.RFC3339Nano) }

// RestartAsIs restarts a component whose manifest must not change otherwise:
// it sets the restarted-at annotation to stamp on the manifest as it is on
// disk, where Restart re-renders it and so takes its images from this
// binary. An upgrade rollback runs the newer binary against the older
// manifests it has just restored; re-rendering those would put the newer
// images back. It also gives the restored pod a UID kubelet has not seen
// terminate, which a byte-identical restore would not. The caller chooses
// stamp (and journals it) so that a resumed rollback writes the same bytes
// again, which is a no-op. A component with no manifest is ErrNoManifest.
func (s *Store) RestartAsIs(name, stamp string) (changed bool, err error) {
	b, err := s.Read(name)
	if err != nil {
		return false, fmt.Errorf("restart %s as is: %w", name, err)
	}
	out, err := SetRestartedAt(b, stamp)
	if err != nil {
		return false, fmt.Errorf("restart %s as is: %w", name, err)
	}
	if _, err := s.Sweep(); err != nil {
		return false, err
	}
	return s.write(name, out)
}

// SetRestartedAt returns manifest b with its restarted-at annotation set to
// stamp (removed when stamp is ""), every other field as decoded from b.
func SetRestartedAt(b []byte, stamp string) ([]byte, error) {
	pod, err := DecodePod(b)
	if err != nil {
		return nil, err
	}
	if stamp == "" {
		delete(pod.Annotations, RestartedAtAnnotation)
		if len(pod.Annotations) == 0 {
			pod.Annotations = nil
		}
		return Encode(pod)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[RestartedAtAnnotation] = stamp
	return Encode(pod)
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
