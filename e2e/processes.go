package e2e

// This file finds the Host's processes: shims, container processes, and leftovers by command line.

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/proc"
)

// Shims are the PIDs of the containerd-shim processes serving this Host's
// containerd (their command line names its socket).
func (h *Host) Shims() ([]int, error) {
	return processesWith(h.ContainerdSock)
}

// ComponentPIDs lists the processes running binary inside this Host's
// containers: descendants of its shims, never another test's process of
// the same name.
func (h *Host) ComponentPIDs(binary string) ([]proc.Process, error) {
	shims, err := h.Shims()
	if err != nil {
		return nil, err
	}
	var out []proc.Process
	for _, s := range shims {
		ps, err := proc.Host().Within(s).PIDs(binary)
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// ContainerProcesses lists every process under this Host's shims (the shims
// themselves excluded).
func (h *Host) ContainerProcesses() ([]int, error) {
	shims, err := h.Shims()
	if err != nil {
		return nil, err
	}
	isShim := map[int]bool{}
	for _, s := range shims {
		isShim[s] = true
	}
	var out []int
	for _, pid := range allPIDs() {
		if isShim[pid] {
			continue
		}
		for p := ParentOf(pid); p > 1; p = ParentOf(p) {
			if isShim[p] {
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}

// killLeftovers SIGKILLs every process whose command line names the root
// (shims, a daemon of a killed run) and every process under them.
func (h *Host) killLeftovers() []int {
	var left []int
	for i := 0; i < 50; i++ {
		owners, _ := processesWith(h.Root)
		kids, _ := h.ContainerProcesses()
		all := append(kids, owners...)
		if len(all) == 0 {
			break
		}
		if i == 0 {
			left = all
		}
		for _, pid := range all {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return left
}

// processesWith lists live processes (not this one) whose command line
// contains s.
func processesWith(s string) ([]int, error) {
	var out []int
	for _, pid := range allPIDs() {
		if pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		out = append(out, pid)
	}
	return out, nil
}

func allPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// ParentOf is pid's parent, from /proc/<pid>/stat (0 when it cannot be read).
func ParentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}
