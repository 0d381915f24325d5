package engine

// Stopping a component before its new manifest is written, so that kubelet
// starts the new pod at once instead of holding it 10-15 s.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// Why every replacement stops the old pod first (docs/kubelet-hold.md):
// kubelet starts a static pod only once no other pod of its name is left in
// its pod workers. A manifest rewritten in place makes a new pod (a new UID)
// while the old one still terminates, and kubelet requeues the new one for
// 10 s plus up to 50% jitter, with nothing to wake it earlier. It releases
// the name when the old pod's worker finishes (completeTerminated), 0.3-2 s
// after the pod's last process exited, right after it removed the pod's
// cgroup. A pod written after that starts in about half a second.
//
// So a step removes the manifest, waits for the processes to go and for
// the name to be released, and only then writes. Released means: the pod
// cgroups the old processes ran in are gone plus cgroupMargin, and at least
// goneMargin has passed since the processes were gone; where the cgroups
// cannot be watched (no pod cgroup: kubelet's cgroupsPerQOS off, a layout
// proc does not know, or the processes had exited already), Deadlines.Release
// after the processes were gone. A guess that comes too early costs
// kubelet's hold, never correctness: the step's wait for the replacement
// keeps waiting.
//
// The margins are measured (make bench-kubelet, docs/performance.md,
// kubelet v1.34.4, 100 terminations): the release came 0.31-1.10 s after
// the last process exited, and never before the cgroup was gone; but in 22
// of 100 housekeeping removed the cgroup first, up to 0.70 s before the
// release. max(gone + 1.5 s, cgroup gone + 0.5 s) was never held and left
// at least 0.4 s after the release. They come from the slowest supported
// kubelet: measured again under v1.37.2 and v1.34.4 on a busy machine (30
// terminations each, docs/kubelet-hold.md), 1.37.2 released 0.28-1.34 s
// after the exit and 1.34.4 up to 1.96 s; the rule was early in none.
const (
	// cgroupMargin is waited after the pod cgroups are gone: kubelet's
	// housekeeping may remove a terminated pod's cgroup before its worker
	// finished (cleanupOrphanedPodCgroups).
	cgroupMargin = 500 * time.Millisecond
	// goneMargin is the least time after the processes were gone: the
	// worker waits for a relist (1 s period) that started after they
	// went.
	goneMargin = 1500 * time.Millisecond
	// cgroupBound bounds the wait for the pod cgroups: kubelet retries a
	// pod it could not clean up every 2 s, and a write after this only
	// risks the hold.
	cgroupBound = 10 * time.Second
)

// ticks is d in the clock ticks of a proc.Mark (10 ms), at least one.
func ticks(d time.Duration) uint64 {
	return max(1, uint64(d/(10*time.Millisecond)))
}

// stopForWrite stops comps (their manifests removed, durably, all at once;
// then each one's processes waited out, bounded by the stop deadline),
// waits until kubelet has released their pods' names, and checks that no
// process of them was started again meanwhile: a container start kubelet
// issued just before it saw the removal (a crash-looping container's
// restart) can complete after the process was seen gone; kubelet kills it
// (a pod being terminated is never synced again), and the second wait
// sees it go. From its return until a manifest of comps is written again,
// no process of comps runs, so a mark taken then makes any process started
// later one that kubelet started from the new manifest.
//
// A comp with no manifest on disk is only waited for. st is the node state
// whose render names the processes (the binary name is the same in every
// version). first says that this run found comps running or their
// manifests in place just now, not after an interruption: then, when
// nothing ran and nothing was removed (a component the upgrade adds),
// there is no name to wait for. After an interruption the removal may have
// come just before it, and the release is waited for anyway.
func (e *Engine) stopForWrite(ctx context.Context, r *run, p journal.Phase, st *nodestate.NodeState, comps []string, first bool) error {
	targets := make([]proc.Target, len(comps))
	running := make([]bool, len(comps))
	var cgroups []string
	ran, removedAny := false, false
	for i, comp := range comps {
		t, err := manifest.Target(st, comp)
		if err != nil {
			return err
		}
		targets[i] = t
		ps, err := e.procs.Of(t)
		if err != nil {
			return fmt.Errorf("%s: %w", comp, err)
		}
		cg, err := e.procs.PodCgroups(ps)
		if err != nil {
			return fmt.Errorf("%s: %w", comp, err)
		}
		running[i] = len(ps) > 0
		ran = ran || running[i]
		cgroups = append(cgroups, cg...)
	}
	for i, comp := range comps {
		next := "its new manifest is written"
		if p == journal.PhaseRollingBack {
			next = "its manifest is restored"
		}
		if _, err := e.store.Read(comp); running[i] || !errors.Is(err, manifest.ErrNoManifest) {
			// A component with neither a process nor a manifest (a
			// start, one an upgrade adds) has nothing to stop.
			e.event(r.txn.ID, p, "stop", comp, comp+" to exit", "stopping "+comp+" before "+next)
		}
		removed, err := e.store.Remove(comp)
		if err != nil {
			return err
		}
		removedAny = removedAny || removed
	}
	for i, comp := range comps {
		if err := e.procs.WaitGone(ctx, targets[i], e.dl.Stop); err != nil {
			return fmt.Errorf("stop %s: %w", comp, err)
		}
	}
	if first && !ran && !removedAny {
		return nil
	}
	if err := e.awaitRelease(ctx, cgroups, ran); err != nil {
		return err
	}
	// The last look before the write also arms the wait for the
	// replacement (Processes.Arm): it then starts from this look.
	for i, comp := range comps {
		if ps, err := e.procs.Arm(targets[i]); err == nil && len(ps) == 0 {
			continue
		}
		// Running again, or /proc could not be read: WaitGone waits it
		// out (and retries a failed read until its deadline).
		if err := e.procs.WaitGone(ctx, targets[i], e.dl.Stop); err != nil {
			return fmt.Errorf("%s was started again after it was stopped: %w", comp, err)
		}
	}
	return nil
}

// awaitRelease waits, once the stopped processes are gone, until kubelet
// has (most likely) released their pods' names: until cgroups are gone
// plus cgroupMargin and goneMargin has passed, or, with no cgroup to watch,
// for Deadlines.Release.
// ran says whether any process ran when the stop began: when none did,
// there was nothing whose cgroup could be seen (a resumed step whose
// removal came before the interruption), and the fixed delay is not worth
// a notice.
func (e *Engine) awaitRelease(ctx context.Context, cgroups []string, ran bool) error {
	gone, err := e.procs.Mark()
	if err != nil {
		return err
	}
	if len(cgroups) == 0 {
		if ran {
			e.noCgroupOnce.Do(func() {
				e.log.Info("kubelet's pod cgroups cannot be seen here; each replacement waits a fixed time after the old process exits",
					"release-wait", e.dl.Release)
			})
		}
		gone.Ticks += ticks(e.dl.Release)
		return e.procs.PastMark(ctx, gone)
	}
	if err := e.procs.WaitCgroupsGone(ctx, cgroups, cgroupBound); err != nil {
		if ctx.Err() != nil {
			return err
		}
		e.log.Warn("kubelet did not remove a stopped pod's cgroup; writing the new manifest anyway (kubelet may hold the new pod 10-15 s)", "err", err)
		return nil
	}
	cg, err := e.procs.Mark()
	if err != nil {
		return err
	}
	cg.Ticks = max(cg.Ticks+ticks(cgroupMargin), gone.Ticks+ticks(goneMargin))
	return e.procs.PastMark(ctx, cg)
}
