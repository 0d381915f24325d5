package realcluster

// stratum-upgrade run inside a node of the real cluster, as an operator
// runs it there: the command's JSON events read as they come, so a
// scenario can act in the middle of a given step.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// stratumRun is one stratum-upgrade command running in a node.
type stratumRun struct {
	node *Node
	args []string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	code int

	mu     sync.Mutex
	events []runEvent
	seen   chan struct{} // closed and replaced on every event
}

// runEvent is the part of an engine event (--output json) a scenario
// acts on.
type runEvent struct {
	Phase     string `json:"phase"`
	Step      string `json:"step"`
	Component string `json:"component"`
}

var runSeq struct {
	sync.Mutex
	n int
}

// stratum starts stratum-upgrade args --output json in node n, its output
// appended to <node dir>/stratum-<k>-<verb>.log (kept with the logs of a
// failed test).
func stratum(t *testing.T, n *Node, args ...string) *stratumRun {
	t.Helper()
	bin, err := build.StratumUpgrade(false)
	if err != nil {
		t.Fatal(err)
	}
	runSeq.Lock()
	runSeq.n++
	k := runSeq.n
	runSeq.Unlock()
	r := &stratumRun{node: n, args: args, done: make(chan struct{}), seen: make(chan struct{}),
		log: filepath.Join(n.Dir, fmt.Sprintf("stratum-%02d-%s.log", k, args[0]))}
	logf, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = n.Command(bin, append(args, "--output", "json")...)
	r.cmd.Stderr = logf
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: stratum-upgrade %s", n.Name, strings.Join(args, " "))
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stdout, logf))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev runEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Step != "" {
				r.mu.Lock()
				r.events = append(r.events, ev)
				close(r.seen)
				r.seen = make(chan struct{})
				r.mu.Unlock()
			}
		}
		err := r.cmd.Wait()
		logf.Close()
		r.code = r.cmd.ProcessState.ExitCode()
		if ws, ok := r.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.code = -int(ws.Signal())
		}
		_ = err
		close(r.done)
	}()
	return r
}

// wait is the command's exit code; past timeout the test fails.
func (r *stratumRun) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
		t.Logf("%s: stratum-upgrade %s: exit %d", r.node.Name, strings.Join(r.args, " "), r.code)
		return r.code
	case <-time.After(timeout):
		_ = syscall.Kill(InnerPID(r.cmd), syscall.SIGKILL)
		<-r.done
		t.Fatalf("%s: stratum-upgrade %s still ran after %s: %s", r.node.Name, strings.Join(r.args, " "), timeout, tail(r.log, 30))
		return 0
	}
}

// ok waits and fails the test unless the command exits want.
func (r *stratumRun) ok(t *testing.T, timeout time.Duration, want int) {
	t.Helper()
	if code := r.wait(t, timeout); code != want {
		t.Fatalf("%s: stratum-upgrade %s: exit %d, want %d:\n%s", r.node.Name, strings.Join(r.args, " "), code, want, tail(r.log, 40))
	}
}

// await waits until the command reports an event that match accepts and
// returns it; past timeout, or when the command ends first, the test
// fails.
func (r *stratumRun) await(t *testing.T, timeout time.Duration, what string, match func(runEvent) bool) runEvent {
	t.Helper()
	deadline := time.After(timeout)
	next := 0
	for {
		r.mu.Lock()
		evs, seen := r.events[next:], r.seen
		next = len(r.events)
		r.mu.Unlock()
		for _, ev := range evs {
			if match(ev) {
				return ev
			}
		}
		select {
		case <-seen:
		case <-r.done:
			t.Fatalf("%s: stratum-upgrade %s ended (exit %d) before %s:\n%s", r.node.Name, strings.Join(r.args, " "), r.code, what, tail(r.log, 30))
		case <-deadline:
			t.Fatalf("%s: no %s within %s:\n%s", r.node.Name, what, timeout, tail(r.log, 30))
		}
	}
}

// kill SIGKILLs the command (not the nsenter running it).
func (r *stratumRun) kill(t *testing.T) {
	t.Helper()
	pid := InnerPID(r.cmd)
	if pid == 0 {
		t.Fatalf("%s: stratum-upgrade %s has no process to kill", r.node.Name, strings.Join(r.args, " "))
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	<-r.done
}

// inStep matches the middle of comp's forwards step: its manifest written,
// the command waiting for kubelet to replace its process.
func inStep(comp string) func(runEvent) bool {
	return func(ev runEvent) bool {
		return ev.Step == "wait-replaced" && ev.Component == comp && ev.Phase != "rolling-back"
	}
}
