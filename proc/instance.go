package proc

// The instances of a component: with a surge replacement, the old and the
// new one run side by side, each in its own static pod, and the engine
// must tell them apart exactly.

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// ErrProcessGone is wrapped by the errors of a look at one process
// (Args) that is no longer the process it was: it exited, or its pid now
// names another process (another start time).
var ErrProcessGone = errors.New("process is gone")

// Instances is t's processes (Of, t.NotPods honoured) grouped by the static
// pod that runs them, the earliest started instance first (by the earliest
// start ticks of its processes; ties by UID), each instance's processes by
// pid. PodUID is the pod's UID as normalUID writes it.
//
// byPod is false when pod cgroups are not in use (Identify's ByCgroup):
// then all of t's processes are one Instance with PodUID "", for instances
// cannot be told apart (and a surge must not be attempted). With byPod
// true, a process whose cgroup file cannot be read is in the Instance with
// PodUID "": it is t's (never dropped) but of no known pod. No process
// means no Instance.
func (s *Scanner) Instances(t Target) (insts []Instance, byPod bool, err error) {
	id, pods, err := s.identify(t)
	if err != nil {
		return nil, false, fmt.Errorf("instances of %s: %w", t.Name, err)
	}
	at := map[string]int{} // pod UID -> index in insts
	for i, p := range id.Ours {
		j, ok := at[pods[i]]
		if !ok {
			j = len(insts)
			at[pods[i]] = j
			insts = append(insts, Instance{PodUID: pods[i]})
		}
		insts[j].Processes = append(insts[j].Processes, p)
	}
	first := func(in Instance) uint64 {
		return slices.MinFunc(in.Processes, func(a, b Process) int { return cmp.Compare(a.StartTicks, b.StartTicks) }).StartTicks
	}
	slices.SortFunc(insts, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(first(a), first(b)), cmp.Compare(a.PodUID, b.PodUID))
	})
	return insts, id.ByCgroup, nil
}

// podProcesses is the processes of t that pod uid runs (t.NotPods
// honoured), and whether pod cgroups are in use at all.
func (s *Scanner) podProcesses(t Target, uid string) ([]Process, bool, error) {
	insts, byPod, err := s.Instances(t)
	if err != nil || !byPod {
		return nil, byPod, err
	}
	uid = normalUID(uid)
	for _, in := range insts {
		if in.PodUID == uid && uid != "" {
			return in.Processes, true, nil
		}
	}
	return nil, true, nil
}

// Args is p's argv as it runs now: /proc/<pid>/cmdline split at its NULs.
// It is read from the live process, never from a manifest, so a flag the
// running instance lacks is seen to be missing. The pid's start ticks are
// read after the argv: if they differ from p's, or p exited, the error
// wraps ErrProcessGone, for the argv read may be another process's. An
// empty argv (a zombie, a kernel thread) is gone too. Any other read
// failure is an error: the answer is unknown.
func (s *Scanner) Args(p Process) ([]string, error) {
	b, _, err := readFile(s.pidFile(p.PID, "cmdline"), nil, false)
	if err != nil && !isGone(err) {
		return nil, fmt.Errorf("argv of pid %d: %w", p.PID, err)
	}
	if err := s.same(p); err != nil {
		return nil, fmt.Errorf("argv of pid %d: %w", p.PID, err)
	}
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("argv of pid %d: %w (exited)", p.PID, ErrProcessGone)
	}
	b = bytes.TrimSuffix(b, []byte{0})
	var args []string
	for a := range bytes.SplitSeq(b, []byte{0}) {
		args = append(args, string(a))
	}
	return args, nil
}

// same reports nil when pid p.PID is still process p, an error wrapping
// ErrProcessGone when it exited or the pid names another process now, and
// any other error when that cannot be read.
func (s *Scanner) same(p Process) error {
	ticks, alive, err := s.StartTicks(p.PID)
	switch {
	case err != nil:
		return err
	case !alive:
		return fmt.Errorf("%w (exited)", ErrProcessGone)
	case ticks != p.StartTicks:
		return fmt.Errorf("%w (the pid now names a process started at tick %d, not %d)", ErrProcessGone, ticks, p.StartTicks)
	}
	return nil
}
