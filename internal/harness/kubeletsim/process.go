// Building and spawning a container's process: argv, environment, log
// file, the spawn thread (Pdeathsig), and /proc start ticks.

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
	if err := k.intoCgroup(cmd, c); err != nil {
		afterStart.Delete(cmd)
		lf.Close()
		return nil, "", &startError{"StartError", err}
	}
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
					for _, f := range cl.([]*os.File) {
						f.Close()
					}
				}
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd, done}
	return <-done
}

var afterStart sync.Map // *exec.Cmd -> []*os.File to close once started

// closeAfterStart closes f once cmd started (or failed to); cmd's start
// runs on the spawn thread, never concurrently with this for one cmd.
func closeAfterStart(cmd *exec.Cmd, f *os.File) {
	fs, _ := afterStart.Load(cmd)
	l, _ := fs.([]*os.File)
	afterStart.Store(cmd, append(l, f))
}

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
