package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/ciq/stratum-upgrade/durable"
)

// checkSurge refuses a name that has no surge copy.
func checkSurge(name string) error {
	if !Surges(name) {
		return fmt.Errorf("surge copy of %q: %w (only %s do)", name, ErrNoSurge, joinNames(surging))
	}
	return nil
}

// SurgePath is the path of component name's surge copy. It does not check
// name.
func (s *Store) SurgePath(name string) string { return filepath.Join(s.dir, SurgeFileName(name)) }

// WriteSurge writes b as component name's surge copy, SurgeFileName(name),
// through the one staging path, exactly as Put writes a manifest: atomic
// (a rename over the file), durable (the file and the directory fsynced)
// when it returns, visible staging leftovers swept first, and bytes already
// there not rewritten. b must decode as a pod named SurgePodName(name): a
// copy under the component's own name would be one pod with the canonical
// manifest to kubelet, not a second. On error the file is unchanged. A
// component that does not surge is ErrNoSurge.
func (s *Store) WriteSurge(name string, b []byte) error {
	if err := checkSurge(name); err != nil {
		return err
	}
	if err := s.writable("write surge copy of " + name); err != nil {
		return err
	}
	pod, err := DecodePod(b)
	if err != nil {
		return fmt.Errorf("write surge copy of %s: refusing bytes that are not a pod: %w", name, err)
	}
	if pod.Name != SurgePodName(name) {
		return fmt.Errorf("write surge copy of %s: its pod is named %q, want %q (under the component's own name kubelet would run it in place of %s, not beside it)", name, pod.Name, SurgePodName(name), FileName(name))
	}
	if _, err := s.Sweep(); err != nil {
		return err
	}
	p := s.SurgePath(name)
	if err := checkTarget(p); err != nil {
		return fmt.Errorf("surge copy of %s: %w", name, err)
	}
	changed, err := durable.WriteFile(p, b, FileMode)
	if err != nil {
		return fmt.Errorf("surge copy of %s: %w", name, err)
	}
	if changed {
		s.log.Info("surge copy written", "component", name, "path", p, "bytes", len(b))
	}
	return nil
}

// ReadSurge returns the bytes of component name's surge copy. A missing
// file is ErrNoManifest; a symlink is refused, not followed.
func (s *Store) ReadSurge(name string) ([]byte, error) {
	if err := checkSurge(name); err != nil {
		return nil, err
	}
	b, _, err := durable.ReadRegular(s.SurgePath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("surge copy of %s: %w at %s", name, ErrNoManifest, s.SurgePath(name))
	}
	if err != nil {
		return nil, fmt.Errorf("surge copy of %s: %w", name, err)
	}
	return b, nil
}

// RemoveSurge deletes component name's surge copy durably (the directory
// fsynced when it returns), without waiting for its process. A missing
// file is success, so a resumed removal is a no-op; a symlink or directory
// in its place is refused and left alone.
func (s *Store) RemoveSurge(name string) error {
	if err := checkSurge(name); err != nil {
		return err
	}
	if err := s.writable("remove surge copy of " + name); err != nil {
		return err
	}
	p := s.SurgePath(name)
	if err := checkTarget(p); err != nil {
		return fmt.Errorf("surge copy of %s: %w", name, err)
	}
	removed, err := durable.Remove(p)
	if err != nil {
		return fmt.Errorf("surge copy of %s: %w", name, err)
	}
	if removed {
		s.log.Info("surge copy removed", "component", name)
	}
	return nil
}

// SurgeFiles lists, sorted, the surge copies in the manifest directory
// (entries SurgeComponent accepts, whatever their type): stratum's own
// files, never strays, which only a surge in progress or a crash in one
// leaves. SurgeComponent names each one's component.
func (s *Store) SurgeFiles() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("manifest dir %s: %w", s.dir, err)
	}
	var out []string
	for _, e := range entries {
		if _, ok := SurgeComponent(e.Name()); ok {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
