package proc

import (
	"context"
	"time"
)

// PIDs is Host().PIDs: the processes on this node whose argv[0] base name is
// binary, sorted by pid.
func PIDs(binary string) ([]Process, error) { return Host().PIDs(binary) }

// StartTicks is Host().StartTicks: when pid started, in clock ticks since
// boot, and whether it is alive.
func StartTicks(pid int) (ticks uint64, alive bool, err error) { return Host().StartTicks(pid) }

// Running is Host().Running: whether any process of t.Binary is present.
func Running(t Target) (bool, error) { return Host().Running(t) }

// Active is Host().Active: whether t answers its health endpoint now (or,
// without one, runs).
func Active(ctx context.Context, t Target) bool { return Host().Active(ctx, t) }

// WaitActive is Host().WaitActive: it polls Active until it holds or
// timeout passes.
func WaitActive(ctx context.Context, t Target, timeout time.Duration) error {
	return Host().WaitActive(ctx, t, timeout)
}

// MarkNow is Host().Mark: now on this node, in clock ticks since boot, with
// the boot id.
func MarkNow() (Mark, error) { return Host().Mark() }

// Replaced is Host().Replaced: whether t runs and nothing of it predates m.
func Replaced(t Target, m Mark) (done bool, stale []Process, err error) {
	return Host().Replaced(t, m)
}

// WaitReplaced is Host().WaitReplaced: it waits until every process of t
// started after m and at least one runs.
func WaitReplaced(ctx context.Context, t Target, m Mark, timeout time.Duration) error {
	return Host().WaitReplaced(ctx, t, m, timeout)
}

// WaitGone is Host().WaitGone: it waits until no process of t.Binary runs.
func WaitGone(ctx context.Context, t Target, timeout time.Duration) error {
	return Host().WaitGone(ctx, t, timeout)
}
