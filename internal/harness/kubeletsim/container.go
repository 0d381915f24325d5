// Container processes: starting, reaping and restarting them with
// CrashLoopBackOff.

package kubeletsim

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// startContainer starts c's process, or records why it cannot and
// schedules a retry with CrashLoopBackOff. Called with mu.
func (k *Kubelet) startContainer(c *container) {
	p := c.pod
	c.lastStart = time.Now()
	c.timer = nil
	cmd, logPath, err := k.command(c)
	if err == nil {
		err = spawn(cmd)
		if err != nil {
			err = &startError{"StartError", err}
		}
	}
	if err != nil {
		var se *startError
		reason := "StartError"
		if errors.As(err, &se) {
			reason = se.reason
		}
		k.log.Error("container failed to start", "key", p.src.Key, "container", c.spec.Name, "image", c.spec.Image, "reason", reason, "err", err)
		c.lastExit = &ExitStatus{Time: time.Now(), Code: -1, Reason: reason, Message: err.Error()}
		k.record(EventStartFailed, p, c, 0, 0, reason+": "+err.Error())
		c.state, c.reason = StateWaiting, reason
		k.scheduleRestart(c)
		return
	}
	c.starts++
	c.cmd, c.pid, c.logPath = cmd, cmd.Process.Pid, logPath
	c.startTicks, _ = startTicks(c.pid)
	c.state, c.reason = StateRunning, ""
	p.lastChange = time.Now()
	k.log.Info("container started", "key", p.src.Key, "uid", p.src.UID, "container", c.spec.Name,
		"pid", c.pid, "startTicks", c.startTicks, "argv0", cmd.Args[0], "binary", cmd.Path, "restarts", c.restarts())
	k.record(EventStart, p, c, c.pid, 0, cmd.Args[0])
	k.procs.Add(1)
	go func() {
		defer k.procs.Done()
		werr := cmd.Wait()
		k.onExit(c, cmd, werr)
	}()
}

type startError struct {
	reason string
	err    error
}

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// onExit records the reaping of cmd, kills what is left of its process
// group (a container's processes die with its PID 1), and restarts or
// finishes the pod.
func (k *Kubelet) onExit(c *container, cmd *exec.Cmd, werr error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if c.cmd != cmd {
		return
	}
	p := c.pod
	pid := cmd.Process.Pid
	k.killGroup(pid, syscall.SIGKILL)
	ex := &ExitStatus{Time: time.Now(), PID: pid, RanForMS: time.Since(c.lastStart).Milliseconds()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			ex.Code, ex.Signal = 128+int(ws.Signal()), ws.Signal().String()
		default:
			ex.Code = ws.ExitStatus()
		}
	} else if werr != nil {
		ex.Code, ex.Message = -1, werr.Error()
	}
	if c.killTimer != nil {
		c.killTimer.Stop()
		c.killTimer = nil
	}
	c.cmd, c.pid, c.startTicks, c.lastExit = nil, 0, 0, ex
	p.lastChange = time.Now()
	k.record(EventExit, p, c, pid, 0, fmt.Sprintf("code=%d signal=%s", ex.Code, ex.Signal))
	k.log.Info("container exited", "key", p.src.Key, "uid", p.src.UID, "container", c.spec.Name, "pid", pid,
		"code", ex.Code, "signal", ex.Signal, "ranFor", time.Duration(ex.RanForMS)*time.Millisecond)
	if p.phase == phaseTerminating || k.stopping {
		c.state = StateTerminated
		k.checkTerminated(p)
		k.notify()
		return
	}
	policy := p.src.Pod.Spec.RestartPolicy
	if policy == "" {
		policy = corev1.RestartPolicyAlways
	}
	if policy == corev1.RestartPolicyNever || policy == corev1.RestartPolicyOnFailure && ex.Code == 0 {
		k.log.Info("container not restarted", "key", p.src.Key, "container", c.spec.Name, "restartPolicy", policy)
		c.state, c.reason = StateExited, "Completed"
		k.notify()
		return
	}
	k.scheduleRestart(c)
	k.notify()
}

// scheduleRestart is CrashLoopBackOff: the first restart is immediate; each
// later one waits until the backoff has passed since the previous start,
// and the backoff doubles up to the cap. A container whose previous start
// is older than BackoffReset starts with a fresh backoff. Called with mu.
func (k *Kubelet) scheduleRestart(c *container) {
	p := c.pod
	now := time.Now()
	if now.Sub(c.lastStart) > k.cfg.BackoffReset {
		c.backoff = 0
	}
	if c.backoff == 0 {
		c.backoff = k.cfg.BackoffBase
		k.log.Info("restarting container at once (first restart)", "key", p.src.Key, "container", c.spec.Name, "nextBackoff", c.backoff)
		k.record(EventBackoff, p, c, 0, 0, "first restart: immediate")
		k.startContainer(c)
		return
	}
	at := c.lastStart.Add(c.backoff)
	restart := func() {
		c.backoff *= 2
		if c.backoff > k.cfg.BackoffCap {
			c.backoff = k.cfg.BackoffCap
		}
		k.startContainer(c)
	}
	if !at.After(now) {
		k.log.Info("restarting container: backoff already elapsed", "key", p.src.Key, "container", c.spec.Name, "backoff", c.backoff)
		k.record(EventBackoff, p, c, 0, c.backoff, "backoff already elapsed: restarted at once")
		restart()
		return
	}
	c.state = StateCrashLoop
	k.record(EventBackoff, p, c, 0, c.backoff, "")
	if c.reason == "" {
		c.reason = "CrashLoopBackOff"
	}
	k.log.Info("back-off restarting failed container", "key", p.src.Key, "container", c.spec.Name, "backoff", c.backoff, "restartIn", at.Sub(now))
	c.timer = time.AfterFunc(at.Sub(now), func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if p.phase != phaseRunning || k.pods[p.src.UID] != p || c.cmd != nil || k.stopping {
			return
		}
		restart()
		k.notify()
	})
}
