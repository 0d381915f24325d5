// Package runbin runs the programs under test as child processes, for the
// engine's crash tests, the end-to-end tests, the benchmarks and the demo:
// stratum-upgrade built with its fault points (Stratum), started in a
// process group of its own with one fault point armed (Command), its end
// read the same way everywhere (ExitCode), its group killed (KillGroup),
// its output collected while the test reads it (Output) and cut to a
// log's worth (LastLines).
//
// It does not import testing: the demo links it.
package runbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
)

// TB is the part of testing.TB that Stratum uses.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// Stratum is cmd/stratum-upgrade built with the fault points compiled in,
// once per process (build.StratumUpgrade); a failed build fails t.
func Stratum(t TB) string {
	t.Helper()
	p, err := build.StratumUpgrade(true)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BootIDEnv is the variable that sets the boot id a stratum-upgrade built
// with its fault points reports instead of the kernel's
// (fault.BootIDEnvVar, which exists only in such a build).
const BootIDEnv = "STRATUM_FAULT_BOOT_ID"

// Command is bin with args in a process group of its own (so that
// KillGroup reaches whatever it starts), with the fault point fault armed
// (build.FaultEnv=fault in its environment; "" arms none, whatever the
// test's own environment says) and the kernel's boot id (WithBootID sets
// another).
func Command(bin, fault string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), build.FaultEnv+"="+fault, BootIDEnv+"=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// WithBootID has cmd (from Command) report bootID as the current boot id,
// as after a reboot (testbed's Node.Reboot returns one), and returns it.
func WithBootID(cmd *exec.Cmd, bootID string) *exec.Cmd {
	cmd.Env = append(cmd.Env, BootIDEnv+"="+bootID)
	return cmd
}

// ExitCode reads the end of a command from the error its Run or Wait
// returned: its exit code, or -1 when SIGKILL ended it (a fault point, or
// KillGroup). Any other end is an error: it did not start or could not be
// waited for, or another signal killed it.
func ExitCode(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return -1, err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if ws.Signal() == syscall.SIGKILL {
			return -1, nil
		}
		return -1, fmt.Errorf("ended by a signal other than SIGKILL: %w", err)
	}
	return ee.ExitCode(), nil
}

// KillGroup SIGKILLs the process group cmd leads (started by Command, or
// with Setpgid).
func KillGroup(cmd *exec.Cmd) error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Output collects a running command's output (its Stdout and Stderr) for
// a test that reads it while the command still writes: a bytes.Buffer
// behind a mutex. The zero value is empty and ready.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String is what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}
