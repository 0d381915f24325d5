package e2e

// This file holds the Host itself: its options, start, daemons, PIDs and polling helper.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// DefaultRoot is the directory a Host keeps everything in: containerd's
// root, state and socket, kubelet's root and certificate directories, the
// static pod directory and the node's files. One Host at a time uses it
// (a lock file beside it).
const DefaultRoot = "/tmp/STRATUM-E2E"

// SandboxImage is the pause image containerd runs every pod sandbox from.
const SandboxImage = "registry.k8s.io/pause:3.10"

// hostPaths are paths outside the root that containerd, kubelet or the
// pods' hostPath volumes (DirectoryOrCreate) create on the host. The ones a
// Host finds missing at start are removed at teardown.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd",
	"/etc/ssl/certs", "/etc/ca-certificates", "/etc/pki", "/usr/local/share/ca-certificates",
	"/usr/share/ca-certificates", "/usr/libexec/kubernetes",
}

// Host is a containerd and a kubelet running in standalone mode (no API
// server: pods come only from the static pod directory), each with its own
// directories, socket and ports under Root, started and stopped by PID.
type Host struct {
	Root           string
	ManifestDir    string
	ContainerdSock string
	KubeletRoot    string
	KubeletLog     string
	ContainerdLog  string
	// NodeName is kubelet's --hostname-override.
	NodeName string
	// HealthzPort, ReadOnlyPort and Port are kubelet's listeners, free
	// loopback ports.
	HealthzPort, ReadOnlyPort, Port int
	// SaveLogs, if set, is a directory Stop copies kubelet's and
	// containerd's logs into (replacing what is there) before it removes
	// the root.
	SaveLogs string

	// KubeletVersion is the version of its kubelet (HostOptions).
	KubeletVersion string

	kubeletBin string
	kubeletV   int
	containerd *daemon
	kubelet    *daemon
	unlock     func()
	created    []string // host paths missing at start
	logf       func(string, ...any)
}

// daemon is a process a Host started in its own process group.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
}

func (d *daemon) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the daemon's PID, then SIGKILL after grace. It
// reports whether SIGKILL was needed.
func (d *daemon) stop(grace time.Duration) bool {
	if !d.alive() {
		return false
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return false
	case <-time.After(grace):
	}
	_ = d.cmd.Process.Kill()
	<-d.exited
	return true
}

// HostOptions configure StartHost.
type HostOptions struct {
	// Root defaults to DefaultRoot; it is wiped at start and at teardown.
	Root string
	// NodeName defaults to cp-1.
	NodeName string
	// Images is the docker-archive imported into containerd's k8s.io
	// namespace before kubelet starts.
	Images string
	// Kubelet is the kubelet binary (KubeletBinary), of KubeletVersion.
	Kubelet        string
	KubeletVersion string
	// KubeletVerbosity is kubelet's --v; 0 means 2. At 4 kubelet logs
	// when a terminated pod's worker releases its name
	// (docs/kubelet-hold.md).
	KubeletVerbosity int
	// Logf receives progress messages; default none.
	Logf func(string, ...any)
}

// StartHost takes the root's lock, cleans up whatever a previous run that
// was killed left there (its processes, by the root path in their command
// line; its mounts), starts containerd, imports the images, and starts
// kubelet watching an empty static pod directory. On error it tears down
// what it started; the returned Host, when non-nil, must be stopped.
func StartHost(ctx context.Context, o HostOptions) (*Host, error) {
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if o.NodeName == "" {
		o.NodeName = "cp-1"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	h := &Host{
		Root:           o.Root,
		ManifestDir:    filepath.Join(o.Root, "manifests"),
		ContainerdSock: filepath.Join(o.Root, "containerd", "containerd.sock"),
		KubeletRoot:    filepath.Join(o.Root, "kubelet"),
		KubeletLog:     filepath.Join(o.Root, "kubelet.log"),
		ContainerdLog:  filepath.Join(o.Root, "containerd.log"),
		NodeName:       o.NodeName,
		kubeletBin:     o.Kubelet,
		KubeletVersion: o.KubeletVersion,
		kubeletV:       o.KubeletVerbosity,
		logf:           o.Logf,
	}
	unlock, err := build.Lock(o.Root+".lock", 30*time.Minute)
	if err != nil {
		return nil, err
	}
	h.unlock = unlock
	if err := h.cleanStale(); err != nil {
		unlock()
		return nil, err
	}
	if err := h.recordHostPaths(); err != nil {
		unlock()
		return nil, err
	}
	for _, d := range []string{h.ManifestDir, h.KubeletRoot, filepath.Join(o.Root, "kubelet-certs"), filepath.Join(o.Root, "pod-logs"),
		filepath.Join(o.Root, "cni", "bin"), filepath.Join(o.Root, "cni", "net.d"), filepath.Join(o.Root, "containerd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			unlock()
			return nil, fmt.Errorf("e2e host: %w", err)
		}
	}
	ports, err := testbed.FreePorts(3)
	if err != nil {
		unlock()
		return nil, err
	}
	h.HealthzPort, h.ReadOnlyPort, h.Port = ports[0], ports[1], ports[2]
	if err := h.startContainerd(ctx); err != nil {
		return h, err
	}
	if o.Images != "" {
		if err := h.Import(ctx, o.Images); err != nil {
			return h, err
		}
	}
	if err := h.StartKubelet(ctx); err != nil {
		return h, err
	}
	return h, nil
}

func (h *Host) expand(s string) string {
	return strings.NewReplacer("{{root}}", h.Root, "{{sock}}", h.ContainerdSock, "{{pause}}", SandboxImage,
		"{{manifests}}", h.ManifestDir, "{{port}}", strconv.Itoa(h.Port), "{{readonly}}", strconv.Itoa(h.ReadOnlyPort),
		"{{healthz}}", strconv.Itoa(h.HealthzPort)).Replace(s)
}

func (h *Host) spawn(name, logPath string, argv ...string) (*daemon, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("e2e host: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = h.Root
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	// Pdeathsig: a test binary that dies (a go test timeout) takes the
	// daemons with it; their shims and containers are cleaned by the next
	// StartHost. kubeletsim.Spawn forks from one locked thread, since
	// Pdeathsig follows the forking thread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := kubeletsim.Spawn(cmd); err != nil {
		return nil, fmt.Errorf("e2e host: start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	return d, nil
}

// ContainerdPID and KubeletPID are the daemons' PIDs (0 when not running).
func (h *Host) ContainerdPID() int { return pidOf(h.containerd) }

// KubeletPID is kubelet's PID, 0 when it does not run.
func (h *Host) KubeletPID() int { return pidOf(h.kubelet) }

func pidOf(d *daemon) int {
	if d == nil || !d.alive() {
		return 0
	}
	return d.cmd.Process.Pid
}

// waitUntil polls cond every 100 ms until it is true, it fails, ctx ends or
// timeout passes; the timeout error names what it waited for.
func waitUntil(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
