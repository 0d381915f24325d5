package main

import (
	"runtime"
	"testing"
)

// TestOneProc: without GOMAXPROCS in the environment the command runs Go
// code on one processor; with it, the environment's value stands.
func TestOneProc(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })

	runtime.GOMAXPROCS(2)
	t.Setenv("GOMAXPROCS", "2")
	oneProc()
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Errorf("GOMAXPROCS=2 in the environment: runs on %d processors, want 2", got)
	}
	t.Setenv("GOMAXPROCS", "")
	oneProc()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("no GOMAXPROCS: runs on %d processors, want 1", got)
	}
}
