package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

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
