package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

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
	Surges    []string // surge copies present (SurgeFiles), left alone
}

// WriteAll makes the manifest directory hold exactly the render of st: it is
// what runs on controller start, so it is idempotent and overwrites hand
// edits by design. It first renders everything and checks every target (an
// unknown component, a render error, or a symlink where a manifest belongs
// fails the call before anything is written); then it sweeps staging
// leftovers, writes the derived files (before the manifests, since
// kube-apiserver reads them only when it starts), writes each roster
// manifest in start order, and removes the manifest of any component that
// left the roster (kube-vip when the VIP is dropped). A surge copy is left
// in place and reported (Surges): the transaction that wrote it removes it.
// Each manifest keeps the
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
	res.Swept, res.Strays, res.Surges = sw.Swept, sw.Strays, sw.Surges
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
