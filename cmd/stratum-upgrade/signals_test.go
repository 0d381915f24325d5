package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// started is a stratum-upgrade command running in the background, its
// stdout read line by line.
type started struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    io.ReadCloser
	lines  chan string
	stderr bytes.Buffer
	seen   strings.Builder
}

func (c *cliNode) background(args ...string) *started {
	c.t.Helper()
	s := &started{t: c.t, cmd: c.command(args...), lines: make(chan string, 1000)}
	s.cmd.Stderr = &s.stderr
	var err error
	if s.out, err = s.cmd.StdoutPipe(); err != nil {
		c.t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(s.out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
	}()
	c.t.Cleanup(func() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() })
	return s
}

// await reads stdout until a line contains sub, for at most 60 s.
func (s *started) await(sub string) {
	s.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("stdout closed before a line with %q:\n%s%s", sub, s.seen.String(), s.stderr.String())
			}
			s.seen.WriteString(l + "\n")
			if strings.Contains(l, sub) {
				return
			}
		case <-deadline:
			s.t.Fatalf("no line with %q within 60s:\n%s", sub, s.seen.String())
		}
	}
}

// wait waits for the command to exit, at most 60 s, and returns its exit
// code (-1: killed by a signal) and the rest of stdout read.
func (s *started) wait() (int, string) {
	s.t.Helper()
	done := make(chan error, 1)
	go func() {
		for l := range s.lines {
			s.seen.WriteString(l + "\n")
		}
		done <- s.cmd.Wait()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		s.t.Fatalf("the command did not exit within 60s:\n%s", s.seen.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), s.seen.String()
	case err != nil:
		s.t.Fatal(err)
	}
	return 0, s.seen.String()
}

// TestSIGHUPInterruptsResumably: SIGHUP (an ssh session that dropped) in
// the middle of a transaction is handled as SIGTERM: the command stops,
// exits 6 and leaves the transaction open, and resume finishes it. Before
// the fix the process died of the signal (exit 129 in a shell) without a
// word.
func TestSIGHUPInterruptsResumably(t *testing.T) {
	_, c := startCLINode(t)
	c.want(cli.ExitOK, "init", "--state="+c.node.StateFile)
	s := c.background("restart", nodestate.Scheduler, "--soak=60s")
	s.await("verifying every component for 1m0s")
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	code, out := s.wait()
	if code != cli.ExitInterrupted {
		t.Fatalf("restart sent SIGHUP: exit %d, want %d\n%s%s", code, cli.ExitInterrupted, out, s.stderr.String())
	}
	contains(t, "restart sent SIGHUP", out, "interrupted after ", "is still open")
	contains(t, "status after SIGHUP", c.want(cli.ExitOK, "status"), "phase verifying")
	out = c.want(cli.ExitOK, "resume", "--soak=1s")
	contains(t, "resume after SIGHUP", out, "\ncommitted ")
}

// TestClosedStdoutDoesNotKill: a reader of stdout that goes away early (a
// `| head`) does not kill the transaction: the writes fail, the restart
// goes on and commits (exit 0). Before the fix the first write after the
// close killed the process with SIGPIPE, the transaction left open.
func TestClosedStdoutDoesNotKill(t *testing.T) {
	_, c := startCLINode(t)
	c.want(cli.ExitOK, "init", "--state="+c.node.StateFile)
	s := c.background("restart", nodestate.Scheduler, "--soak=2s")
	s.await("restart: kube-scheduler")
	s.out.Close()
	code, _ := s.wait()
	if code != cli.ExitOK {
		t.Fatalf("restart with its stdout closed: exit %d, want %d (-1: killed by a signal)\n%s", code, cli.ExitOK, s.stderr.String())
	}
	status := c.want(cli.ExitOK, "status")
	contains(t, "status after the restart", status, "transaction:  none open; last ", " restart committed")
}
