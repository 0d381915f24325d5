package testbed

// This file tears a node down and finds and kills the processes it leaves behind.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
)

// Stop tears the node down: removes every visible file in the manifest
// directory and waits for the stand-in to report no pods, stops the
// stand-in (SIGTERM, then SIGKILL of its process group), then kills any
// process still carrying the node's marker and waits until none is left.
// It returns an error naming whatever had to be killed by force or could
// not be; a second call returns the first call's result.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() { n.stopErr = n.stop() })
	return n.stopErr
}

func (n *Node) stop() error {
	var problems []string
	if n.cmd != nil && n.Kubelet != nil {
		if paths, err := kubeletsim.ListDir(n.ManifestDir); err == nil {
			for _, p := range paths {
				_ = os.RemoveAll(p)
			}
		}
		select {
		case <-n.exited:
			problems = append(problems, "the kubelet stand-in had already exited (see "+n.KubeletLog+")")
		default:
			err := n.Kubelet.WaitFor(context.Background(), "every pod gone after the manifests were removed", 60*time.Second,
				func(st []kubeletsim.PodStatus) bool { return len(st) == 0 })
			if err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(15 * time.Second):
			problems = append(problems, "the kubelet stand-in ignored SIGTERM for 15s; killed")
			_ = syscall.Kill(-n.KubeletPID, syscall.SIGKILL)
			<-n.exited
		}
	}
	left, err := n.killLeftovers(10 * time.Second)
	if err != nil {
		problems = append(problems, err.Error())
	}
	if len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes left behind and killed: %v", left))
	}
	if err := n.clearCgroups(true); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Leftovers lists the live processes carrying this node's marker.
func (n *Node) Leftovers() ([]int, error) { return markedProcesses(n.Root) }

func (n *Node) killLeftovers(timeout time.Duration) ([]int, error) {
	first, err := markedProcesses(n.Root)
	if err != nil || len(first) == 0 {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	for {
		pids, err := markedProcesses(n.Root)
		if err != nil {
			return first, err
		}
		if len(pids) == 0 {
			return first, nil
		}
		if time.Now().After(deadline) {
			return first, fmt.Errorf("processes %v survived SIGKILL for %s", pids, timeout)
		}
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// markedProcesses scans /proc for live processes whose environment holds
// MarkerEnv=root. Processes that vanish or cannot be read are skipped:
// teardown runs as the user that started them.
func markedProcesses(root string) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("testbed: scan /proc: %w", err)
	}
	want := []byte(MarkerEnv + "=" + root + "\x00")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !containsEnv(env, want) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out, nil
}

func containsEnv(env, want []byte) bool {
	return strings.HasPrefix(string(env), string(want)) || strings.Contains(string(env), "\x00"+string(want))
}
