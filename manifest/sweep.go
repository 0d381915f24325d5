package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"github.com/ciq/stratum-upgrade/durable"
)

// Staging leftovers. An older writer that was not atomic wrote a visible
// "<name>.yaml.tmp" (or os.CreateTemp's "<name>.yaml.tmp<digits>"),
// "<name>.yaml.new", or an editor-style "<name>.yaml~" next to the manifest
// and renamed it. kubelet parses every visible file as a pod, and these sort
// AFTER "<name>.yaml", so one left behind by a crash wins that pod's store key
// at every relist and runs a half-written or stale pod. They are swept before
// every write, when they are regular files (see Sweep). The hidden ".<name>.yaml<digits>" files are renameio's own
// staging files: kubelet ignores hidden files, but one survives only a crash
// mid-write, and it is swept too so a converged directory holds nothing else
// (a surge copy's as well). A surge copy itself ("<name>-surge.yaml") is
// ours and left in place. Any other visible file is not ours: it is
// reported, never deleted.
var (
	visibleLeftover = regexp.MustCompile(`^(` + strings.Join(quoteAll(Names), "|") + `)\.yaml(\.tmp[0-9]*|\.new|~)$`)
	hiddenLeftover  = regexp.MustCompile(`^\.(` + strings.Join(quoteAll(append(surgePodNames(), Names...)), "|") + `)\.yaml[0-9]+$`)
)

// surgePodNames are the base names of the surge copies (SurgeFileName):
// their writes stage through the same hidden files as a manifest's.
func surgePodNames() []string {
	out := make([]string, len(surging))
	for i, n := range surging {
		out[i] = SurgePodName(n)
	}
	return out
}

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

// SweepResult says what Sweep found.
type SweepResult struct {
	Swept  []string // staging leftovers removed
	Strays []string // other entries that are not manifests of ours, left alone
	// Surges are the surge copies present (SurgeFiles): ours, left in
	// place, for the engine to finish or remove.
	Surges []string
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
		if _, ok := SurgeComponent(name); ok {
			res.Surges = append(res.Surges, name)
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
		// Info, not a warning: the stray is in the result, and each command
		// reports its strays once, in its output (issue 32: they were twice).
		s.log.Info("entry in the manifest directory is not a stratum manifest; left alone", "file", name, "kubelet", StrayNote(s.dir, name))
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
// component manifests or surge copies, without changing anything: the
// strays a Sweep reports, plus any regular-file staging leftover a Sweep
// would remove.
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
		if _, ok := SurgeComponent(name); ok {
			continue
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}
