// Pod workers: their phases and status, and the pod lifecycle (start once
// an older pod of the name is gone, kill with a grace period, housekeeping).

package kubeletsim

import (
	"os/exec"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

type phase int

const (
	phasePending     phase = iota // created, waiting for an older pod of its name
	phaseRunning                  // containers started (and restarted)
	phaseTerminating              // killed, waiting for every process to be reaped
	phaseTerminated               // every process reaped; holds its name until housekeeping
	phaseRejected                 // refused at admission: never runs, holds nothing
)

// Pod and container states reported by the status endpoint.
const (
	StateWaiting     = "waiting"     // not started yet: held back, being created (StartLatency), or its start failed
	StateRunning     = "running"     // the process runs
	StateCrashLoop   = "crashloop"   // exited, waiting out CrashLoopBackOff
	StateExited      = "exited"      // exited and not restarted (restartPolicy)
	StateTerminating = "terminating" // killed, not yet reaped
	StateTerminated  = "terminated"  // killed and reaped
	StateFailed      = "failed"      // rejected at admission (Reason, Message): never runs
)

type pod struct {
	src              *SourcePod
	phase            phase
	containers       []*container
	created          time.Time
	lastChange       time.Time
	startTimer       *time.Timer // a held pod's recheck, or its containers' start after StartLatency
	held             bool        // had to wait for an older pod of its name
	restartRequested bool
	rejected         *RejectedError // phaseRejected: why
}

type container struct {
	pod        *pod
	spec       corev1.Container
	state      string
	reason     string
	cmd        *exec.Cmd
	pid        int
	startTicks uint64
	starts     int
	backoff    time.Duration
	lastStart  time.Time
	lastExit   *ExitStatus
	timer      *time.Timer // pending restart
	killTimer  *time.Timer
	logPath    string
}

// ExitStatus is how a container's process ended, or why it did not start.
type ExitStatus struct {
	Time     time.Time `json:"time"`
	Code     int       `json:"code"`
	Signal   string    `json:"signal,omitempty"`
	Reason   string    `json:"reason,omitempty"` // e.g. ErrImageNeverPull, StartError
	Message  string    `json:"message,omitempty"`
	PID      int       `json:"pid,omitempty"`
	RanForMS int64     `json:"ranForMs,omitempty"`
}

// ContainerStatus is one container of a PodStatus.
type ContainerStatus struct {
	Name       string      `json:"name"`
	Image      string      `json:"image"`
	PID        int         `json:"pid"`
	StartTicks uint64      `json:"startTicks"`
	Restarts   int         `json:"restarts"`
	State      string      `json:"state"`
	Reason     string      `json:"reason,omitempty"`
	LastExit   *ExitStatus `json:"lastExit,omitempty"`
	Log        string      `json:"log,omitempty"`
}

// PodStatus is one pod worker as GET /pods reports it. PID, StartTicks,
// Restarts and LastExit are the first container's; State is the pod's
// phase, or the first container's state while the pod runs.
type PodStatus struct {
	Key        string            `json:"key"`
	File       string            `json:"file"`
	UID        string            `json:"uid"`
	PID        int               `json:"pid"`
	StartTicks uint64            `json:"startTicks"`
	Restarts   int               `json:"restarts"`
	State      string            `json:"state"`
	Reason     string            `json:"reason,omitempty"`  // a failed pod's: ReasonNodePorts
	Message    string            `json:"message,omitempty"` // a failed pod's: MessageNodePorts
	LastExit   *ExitStatus       `json:"lastExit,omitempty"`
	LastChange time.Time         `json:"lastChange"`
	Created    time.Time         `json:"created"`
	Containers []ContainerStatus `json:"containers"`
}

func (p *pod) status() PodStatus {
	st := PodStatus{Key: p.src.Key, File: p.src.File, UID: p.src.UID, LastChange: p.lastChange, Created: p.created}
	for _, c := range p.containers {
		st.Containers = append(st.Containers, ContainerStatus{
			Name: c.spec.Name, Image: c.spec.Image, PID: c.pid, StartTicks: c.startTicks,
			Restarts: c.restarts(), State: c.state, Reason: c.reason, LastExit: c.lastExit, Log: c.logPath,
		})
	}
	first := st.Containers[0]
	st.PID, st.StartTicks, st.Restarts, st.LastExit = first.PID, first.StartTicks, first.Restarts, first.LastExit
	switch p.phase {
	case phasePending:
		st.State = StateWaiting
	case phaseTerminating:
		st.State = StateTerminating
	case phaseTerminated:
		st.State = StateTerminated
	case phaseRejected:
		st.State, st.Reason, st.Message = StateFailed, p.rejected.Reason, p.rejected.Message
	default:
		st.State = first.State
	}
	return st
}

func (c *container) restarts() int {
	if c.starts == 0 {
		return 0
	}
	return c.starts - 1
}

func (k *Kubelet) newPod(sp *SourcePod) *pod {
	now := time.Now()
	p := &pod{src: sp, phase: phasePending, created: now, lastChange: now}
	for _, cs := range sp.Pod.Spec.Containers {
		p.containers = append(p.containers, &container{pod: p, spec: cs, state: StateWaiting, reason: "PodInitializing"})
	}
	if len(sp.Pod.Spec.InitContainers) > 0 {
		k.log.Warn("init containers are not modelled; skipping them", "key", sp.Key)
	}
	return p
}

// tryStart starts p unless an older pod of its name has not been cleaned up
// yet (pod_workers allowStaticPodStart); then it is checked again after the
// pod workers' backoff. Called with mu.
func (k *Kubelet) tryStart(p *pod) {
	if p.phase != phasePending || k.stopping {
		return
	}
	var blocker *pod
	for _, o := range k.pods {
		// A rejected pod never reached the pod workers: it blocks nothing.
		if o != p && o.src.Key == p.src.Key && o.phase != phasePending && o.phase != phaseRejected {
			blocker = o
			break
		}
	}
	if blocker != nil {
		d := k.jitter(k.cfg.StartDelay)
		p.held = true
		k.record(EventHeld, p, nil, 0, d, "blocked by "+blocker.src.UID)
		k.log.Info("pod cannot start yet: an older pod of the same name has not terminated and been cleaned up; checking again later",
			"key", p.src.Key, "uid", p.src.UID, "blockingUID", blocker.src.UID, "blockingState", blocker.status().State, "recheckIn", d)
		p.startTimer = time.AfterFunc(d, func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.pods[p.src.UID] == p {
				k.tryStart(p)
			}
		})
		return
	}
	k.log.Info("starting pod", "key", p.src.Key, "uid", p.src.UID, "file", p.src.File, "heldBack", p.held, "latency", k.cfg.StartLatency)
	p.phase = phaseRunning
	p.lastChange = time.Now()
	if k.cfg.StartLatency > 0 {
		for _, c := range p.containers {
			c.reason = "ContainerCreating"
		}
		p.startTimer = time.AfterFunc(k.cfg.StartLatency, func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			// Killed (or the stand-in stopping) meanwhile: nothing starts.
			if k.pods[p.src.UID] != p || p.phase != phaseRunning || k.stopping {
				return
			}
			k.startContainers(p)
		})
		k.notify()
		return
	}
	k.startContainers(p)
}

// startContainers starts every container of p, which runs. Called with mu.
func (k *Kubelet) startContainers(p *pod) {
	for _, c := range p.containers {
		k.startContainer(c)
	}
	k.notify()
}

// terminate kills p: SIGTERM to every container's process group, SIGKILL
// after the grace period. Called with mu.
func (k *Kubelet) terminate(p *pod, why string) {
	if p.startTimer != nil {
		p.startTimer.Stop()
	}
	if p.phase == phasePending {
		k.log.Info("dropping a pod that never started", "key", p.src.Key, "uid", p.src.UID, "why", why)
		delete(k.pods, p.src.UID)
		k.notify()
		return
	}
	if p.phase != phaseRunning {
		return
	}
	grace := k.grace(p)
	k.log.Info("killing pod", "key", p.src.Key, "uid", p.src.UID, "why", why, "grace", grace)
	p.phase = phaseTerminating
	p.lastChange = time.Now()
	k.record(EventKill, p, nil, 0, grace, why)
	for _, c := range p.containers {
		if c.timer != nil {
			c.timer.Stop()
			c.timer = nil
		}
		if c.cmd == nil {
			c.state = StateExited
			continue
		}
		pid := c.pid
		k.log.Info("sending SIGTERM", "key", p.src.Key, "container", c.spec.Name, "pid", pid)
		k.killGroup(pid, syscall.SIGTERM)
		cmd := c.cmd
		c.killTimer = time.AfterFunc(grace, func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			if c.cmd == cmd {
				k.log.Info("grace period over; sending SIGKILL", "key", p.src.Key, "container", c.spec.Name, "pid", pid, "grace", grace)
				k.killGroup(pid, syscall.SIGKILL)
				k.record(EventSIGKILL, p, c, pid, 0, "")
			}
		})
	}
	k.checkTerminated(p)
	k.notify()
}

// grace is kubelet's grace period for killing p.
func (k *Kubelet) grace(p *pod) time.Duration {
	secs := int64(defaultGraceSeconds)
	if g := p.src.Pod.Spec.TerminationGracePeriodSeconds; g != nil {
		secs = *g
	}
	d := time.Duration(secs) * time.Second
	if d < k.cfg.GraceFloor {
		d = k.cfg.GraceFloor
	}
	if k.cfg.GraceCap > 0 && d > k.cfg.GraceCap {
		d = k.cfg.GraceCap
	}
	return d
}

// checkTerminated moves a terminating pod whose processes are all reaped
// to terminated, and schedules its cleanup. Called with mu.
func (k *Kubelet) checkTerminated(p *pod) {
	if p.phase != phaseTerminating {
		return
	}
	for _, c := range p.containers {
		if c.cmd != nil {
			return
		}
	}
	p.phase = phaseTerminated
	p.lastChange = time.Now()
	k.log.Info("pod terminated: every process reaped", "key", p.src.Key, "uid", p.src.UID)
	k.record(EventTerminated, p, nil, 0, 0, "")
	time.AfterFunc(k.cfg.Housekeeping, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.pods[p.src.UID] != p || k.finished {
			return
		}
		k.log.Info("housekeeping: removing terminated pod worker", "key", p.src.Key, "uid", p.src.UID)
		k.removePodCgroup(p)
		delete(k.pods, p.src.UID)
		if p.restartRequested {
			k.reconcile()
		}
		k.notify()
	})
}
