package kubeletsim

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
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
)

// Pod and container states reported by the status endpoint.
const (
	StateWaiting     = "waiting"     // not started yet: held back, or its start failed
	StateRunning     = "running"     // the process runs
	StateCrashLoop   = "crashloop"   // exited, waiting out CrashLoopBackOff
	StateExited      = "exited"      // exited and not restarted (restartPolicy)
	StateTerminating = "terminating" // killed, not yet reaped
	StateTerminated  = "terminated"  // killed and reaped
)

type pod struct {
	src              *SourcePod
	phase            phase
	containers       []*container
	created          time.Time
	lastChange       time.Time
	startTimer       *time.Timer
	held             bool // had to wait for an older pod of its name
	restartRequested bool
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
		if o != p && o.src.Key == p.src.Key && o.phase != phasePending {
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
	k.log.Info("starting pod", "key", p.src.Key, "uid", p.src.UID, "file", p.src.File, "heldBack", p.held)
	p.phase = phaseRunning
	p.lastChange = time.Now()
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
		delete(k.pods, p.src.UID)
		if p.restartRequested {
			k.reconcile()
		}
		k.notify()
	})
}

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

// command builds the process for c: the mapped binary, argv = command (or
// the image entrypoint) + args with $(VAR) expanded from the pod env, env =
// image ENV overlaid by the pod env plus the runtime's defaults
// (runtimeEnv), own process group, Pdeathsig SIGKILL,
// stdout and stderr appended to a per-container log file.
func (k *Kubelet) command(c *container) (*exec.Cmd, string, error) {
	p := c.pod
	images := k.cfg.Images
	if images == nil {
		m, err := LoadImageMap(k.cfg.ImageMapFile)
		if err != nil {
			return nil, "", &startError{"ErrImageInspect", err}
		}
		images = m
	}
	img, ok := images[c.spec.Image]
	if !ok {
		return nil, "", &startError{"ErrImageNeverPull", fmt.Errorf("image %q is not present (not in the image map) and pulling is not possible", c.spec.Image)}
	}
	podEnv, order, err := k.podEnv(p, c.spec)
	if err != nil {
		return nil, "", &startError{"CreateContainerConfigError", err}
	}
	lookup := func(name string) (string, bool) { v, ok := podEnv[name]; return v, ok }
	var argv []string
	if len(c.spec.Command) > 0 {
		for _, a := range c.spec.Command {
			argv = append(argv, Expand(a, lookup))
		}
	} else if len(img.Entrypoint) > 0 {
		argv = append(argv, img.Entrypoint...)
	} else {
		argv = append(argv, img.Binary)
	}
	for _, a := range c.spec.Args {
		argv = append(argv, Expand(a, lookup))
	}
	env := make([]string, 0, len(img.Env)+len(order))
	imgKeys := make([]string, 0, len(img.Env))
	for key := range img.Env {
		imgKeys = append(imgKeys, key)
	}
	sort.Strings(imgKeys)
	for _, key := range imgKeys {
		if _, over := podEnv[key]; !over {
			env = append(env, key+"="+img.Env[key])
		}
	}
	for _, key := range order {
		env = append(env, key+"="+podEnv[key])
	}
	env = runtimeEnv(env, p.src.Pod, k.cfg.NodeName)
	dir := c.spec.WorkingDir
	if dir == "" {
		dir = "/"
	}
	logDir := filepath.Join(k.cfg.RootDir, "logs", strings.ReplaceAll(p.src.Key, "/", "_")+"_"+p.src.UID[:8])
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, "", &startError{"StartError", err}
	}
	logPath := filepath.Join(logDir, c.spec.Name+".log")
	lf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", &startError{"StartError", err}
	}
	fmt.Fprintf(lf, "=== kubelet stand-in: start %d of %s at %s: %q\n", c.starts+1, c.spec.Name, time.Now().Format(time.RFC3339Nano), argv)
	cmd := &exec.Cmd{
		Path:   img.Binary,
		Args:   argv,
		Env:    env,
		Dir:    dir,
		Stdout: lf,
		Stderr: lf,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	// The child holds its own copy of the log descriptor.
	closeAfterStart(cmd, lf)
	return cmd, logPath, nil
}

// DefaultPath is the PATH the container runtime gives a container whose
// image and pod set none (containerd's default OCI spec).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// runtimeEnv adds what the container runtime puts in every container's
// environment besides the image's ENV and the pod's env, each only when
// neither sets it: PATH=DefaultPath and HOSTNAME (containerd's CRI), and
// HOME=/ (runc, from the container's /etc/passwd, which our images lack).
// HOSTNAME is the host's hostname for a hostNetwork pod (checked against
// containerd 1.6 and runc 1.1 under kubelet v1.34 by the e2e test
// TestHostRunsStaticPod); otherwise it is the pod's spec.hostname or, as
// kubelet's GeneratePodHostNameAndDomain does, its name truncated to 63
// bytes (from kubelet's source: a pod without hostNetwork needs a CNI
// network the e2e host does not have).
func runtimeEnv(env []string, pod *corev1.Pod, nodeName string) []string {
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	host := ""
	switch {
	case pod.Spec.HostNetwork:
		host, _ = os.Hostname()
	case pod.Spec.Hostname != "":
		host = pod.Spec.Hostname
	default:
		host = pod.Name + "-" + strings.ToLower(nodeName)
		if len(host) > 63 {
			host = strings.TrimRight(host[:63], "-.")
		}
	}
	for _, kv := range [][2]string{{"PATH", DefaultPath}, {"HOSTNAME", host}, {"HOME", "/"}} {
		if !set[kv[0]] {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// podEnv is kubelet's makeEnvironmentVariables for a standalone node: each
// env value expanded from the variables defined before it; fieldRefs to
// the pod's own fields; no service links, no secrets or config maps.
func (k *Kubelet) podEnv(p *pod, cs corev1.Container) (map[string]string, []string, error) {
	vals := map[string]string{}
	var order []string
	if len(cs.EnvFrom) > 0 {
		return nil, nil, errors.New("envFrom is not supported by the stand-in (no config maps or secrets on a standalone node)")
	}
	for _, e := range cs.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
			v = Expand(v, func(n string) (string, bool) { x, ok := vals[n]; return x, ok })
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = p.src.Pod.Name + "-" + strings.ToLower(k.cfg.NodeName)
			case "metadata.namespace":
				v, _, _ = strings.Cut(p.src.Key, "/")
			case "metadata.uid":
				v = p.src.UID
			case "spec.nodeName":
				v = k.cfg.NodeName
			case "status.hostIP", "status.podIP":
				v = k.cfg.NodeIP
			default:
				return nil, nil, fmt.Errorf("env %s: fieldRef %q is not supported by the stand-in", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		default:
			return nil, nil, fmt.Errorf("env %s: only value and fieldRef are supported by the stand-in", e.Name)
		}
		if _, dup := vals[e.Name]; !dup {
			order = append(order, e.Name)
		}
		vals[e.Name] = v
	}
	return vals, order, nil
}

// Starting processes: Pdeathsig is delivered when the THREAD that forked
// the child exits, and the Go runtime may retire threads. Every child is
// therefore forked from one goroutine locked to its thread for the life of
// the process.
//
// Spawn starts cmd that way; a caller that sets Pdeathsig on its own
// children (the test bed, for the stand-in) should start them with it too.
func Spawn(cmd *exec.Cmd) error { return spawn(cmd) }

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawnCh {
				r.done <- r.cmd.Start()
				if cl, ok := afterStart.LoadAndDelete(r.cmd); ok {
					cl.(*os.File).Close()
				}
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd, done}
	return <-done
}

var afterStart sync.Map // *exec.Cmd -> *os.File to close once started

func closeAfterStart(cmd *exec.Cmd, f *os.File) { afterStart.Store(cmd, f) }

// startTicks reads a process's start time in clock ticks since boot,
// /proc/<pid>/stat field 22.
func startTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no comm field", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	var t uint64
	if _, err := fmt.Sscan(fields[19], &t); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: start time %q: %w", pid, fields[19], err)
	}
	return t, nil
}
