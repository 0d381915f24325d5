package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/proc"
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

	kubeletBin string
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
	// Kubelet is the kubelet binary (KubeletBinary).
	Kubelet string
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

const containerdConfig = `version = 2
root = "{{root}}/containerd/root"
state = "{{root}}/containerd/state"

[grpc]
  address = "{{sock}}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{pause}}"
  enable_cdi = false
  # no CAP_SYS_RESOURCE on these machines: a negative oom_score_adj
  # (the sandbox default -998) cannot be set
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{root}}/cni/bin"
    conf_dir = "{{root}}/cni/net.d"
`

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# standalone: no kubeconfig, no API server; pods come only from staticPodPath
staticPodPath: {{manifests}}
fileCheckFrequency: 20s
containerRuntimeEndpoint: unix://{{sock}}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: {{root}}/pod-logs
address: 127.0.0.1
port: {{port}}
readOnlyPort: {{readonly}}
healthzBindAddress: 127.0.0.1
healthzPort: {{healthz}}
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
resolvConf: /etc/resolv.conf
`

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

func (h *Host) startContainerd(ctx context.Context) error {
	cfg := filepath.Join(h.Root, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(h.expand(containerdConfig)), 0o644); err != nil {
		return fmt.Errorf("e2e host: %w", err)
	}
	start := time.Now()
	d, err := h.spawn("containerd", h.ContainerdLog, "containerd", "--config", cfg)
	if err != nil {
		return err
	}
	h.containerd = d
	err = waitUntil(ctx, "containerd to answer on "+h.ContainerdSock, 30*time.Second, func() (bool, error) {
		if !d.alive() {
			return false, fmt.Errorf("containerd exited: %s", tailFile(h.ContainerdLog, 20))
		}
		_, err := h.ctr(ctx, "version")
		return err == nil, nil
	})
	if err != nil {
		return err
	}
	h.logf("containerd pid %d up in %s", d.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	return nil
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

// ctr runs ctr against the Host's containerd in the k8s.io namespace.
func (h *Host) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ctr", append([]string{"-a", h.ContainerdSock, "-n", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Import imports a docker-archive into containerd's k8s.io namespace
// (unpacked for the overlayfs snapshotter, so kubelet finds every image
// present).
func (h *Host) Import(ctx context.Context, archive string) error {
	start := time.Now()
	if _, err := h.ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("import images: %w", err)
	}
	h.logf("images imported in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// Images lists the image references containerd holds.
func (h *Host) Images(ctx context.Context) ([]string, error) {
	out, err := h.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// StartKubelet starts kubelet (again) and waits until its healthz answers.
func (h *Host) StartKubelet(ctx context.Context) error {
	if h.kubelet != nil && h.kubelet.alive() {
		return fmt.Errorf("kubelet already runs (pid %d)", h.kubelet.cmd.Process.Pid)
	}
	cfg := filepath.Join(h.Root, "kubelet-config.yaml")
	if err := os.WriteFile(cfg, []byte(h.expand(kubeletConfig)), 0o644); err != nil {
		return fmt.Errorf("e2e host: %w", err)
	}
	start := time.Now()
	d, err := h.spawn("kubelet", h.KubeletLog, h.kubeletBin, "--config="+cfg, "--root-dir="+h.KubeletRoot,
		"--cert-dir="+filepath.Join(h.Root, "kubelet-certs"), "--hostname-override="+h.NodeName, "--v=2")
	if err != nil {
		return err
	}
	h.kubelet = d
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", h.HealthzPort)
	err = waitUntil(ctx, "kubelet healthz "+url, 60*time.Second, func() (bool, error) {
		if !d.alive() {
			return false, fmt.Errorf("kubelet exited: %s", tailFile(h.KubeletLog, 30))
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return err
	}
	h.logf("kubelet pid %d healthy in %s", d.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	return nil
}

// KillKubelet SIGKILLs kubelet by PID and waits for it to exit; its pods
// keep running (their processes belong to containerd's shims).
func (h *Host) KillKubelet() error {
	if h.kubelet == nil || !h.kubelet.alive() {
		return errors.New("kubelet does not run")
	}
	_ = h.kubelet.cmd.Process.Kill()
	<-h.kubelet.exited
	return nil
}

// PodStatus is one pod as kubelet's read-only /pods endpoint reports it.
type PodStatus struct {
	Name       string
	UID        string
	Phase      string
	Containers []ContainerStatus
}

// ContainerStatus is one container of a PodStatus.
type ContainerStatus struct {
	Name         string
	Image        string
	Ready        bool
	RestartCount int
	Running      bool
}

// Pods reads kubelet's view of its pods (GET /pods on the read-only port).
func (h *Host) Pods(ctx context.Context) ([]PodStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/pods", h.ReadOnlyPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet /pods: %w", err)
	}
	defer resp.Body.Close()
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"metadata"`
			Status struct {
				Phase             string `json:"phase"`
				ContainerStatuses []struct {
					Name         string `json:"name"`
					Image        string `json:"image"`
					Ready        bool   `json:"ready"`
					RestartCount int    `json:"restartCount"`
					State        struct {
						Running *struct{} `json:"running"`
					} `json:"state"`
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("kubelet /pods: %w", err)
	}
	var out []PodStatus
	for _, it := range list.Items {
		p := PodStatus{Name: it.Metadata.Name, UID: it.Metadata.UID, Phase: it.Status.Phase}
		for _, c := range it.Status.ContainerStatuses {
			p.Containers = append(p.Containers, ContainerStatus{Name: c.Name, Image: c.Image, Ready: c.Ready, RestartCount: c.RestartCount, Running: c.State.Running != nil})
		}
		out = append(out, p)
	}
	return out, nil
}

// Tasks lists the running containerd tasks (containers and sandboxes).
func (h *Host) Tasks(ctx context.Context) ([]string, error) {
	out, err := h.ctr(ctx, "tasks", "ls", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

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
		for p := parentOf(pid); p > 1; p = parentOf(p) {
			if isShim[p] {
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}

// Stop tears the Host down, in the order the recipe requires, and returns
// every problem it met (nil when the teardown was clean): remove every
// manifest and wait until containerd runs no task; stop kubelet, then
// containerd, each by PID (SIGTERM, SIGKILL after 30 s); kill any shim or
// container process still there (an error); unmount everything under the
// root; remove the kubepods cgroups, the host paths that did not exist at
// start, and the root (unless keep).
func (h *Host) Stop(keep bool) error {
	var problems []string
	ctx := context.Background()
	if h.containerd != nil && h.containerd.alive() {
		if ents, err := os.ReadDir(h.ManifestDir); err == nil {
			for _, e := range ents {
				_ = os.RemoveAll(filepath.Join(h.ManifestDir, e.Name()))
			}
		}
		if h.kubelet != nil && h.kubelet.alive() {
			start := time.Now()
			err := waitUntil(ctx, "every containerd task gone after the manifests were removed", 90*time.Second, func() (bool, error) {
				ts, err := h.Tasks(ctx)
				return err == nil && len(ts) == 0, nil
			})
			if err != nil {
				problems = append(problems, err.Error())
			} else {
				h.logf("every task gone %s after the manifests were removed", time.Since(start).Round(time.Millisecond))
			}
		} else {
			problems = append(problems, "kubelet was not running at teardown")
		}
	}
	if h.kubelet != nil && h.kubelet.stop(30*time.Second) {
		problems = append(problems, "kubelet ignored SIGTERM for 30s; killed")
	}
	if h.containerd != nil && h.containerd.stop(30*time.Second) {
		problems = append(problems, "containerd ignored SIGTERM for 30s; killed")
	}
	if left := h.killLeftovers(); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes left behind and killed: %v", left))
	}
	if h.SaveLogs != "" {
		if err := h.saveLogs(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := unmountUnder(h.Root); err != nil {
		problems = append(problems, err.Error())
	}
	if err := removeKubepodsCgroups(); err != nil {
		problems = append(problems, err.Error())
	}
	for _, p := range h.created {
		if err := os.RemoveAll(p); err != nil {
			problems = append(problems, err.Error())
		}
	}
	_ = os.Remove(createdRecord(h.Root))
	if !keep {
		if err := os.RemoveAll(h.Root); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if h.unlock != nil {
		h.unlock()
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (h *Host) saveLogs() error {
	if err := os.RemoveAll(h.SaveLogs); err != nil {
		return fmt.Errorf("save logs: %w", err)
	}
	if err := os.MkdirAll(h.SaveLogs, 0o755); err != nil {
		return fmt.Errorf("save logs: %w", err)
	}
	for _, p := range []string{h.KubeletLog, h.ContainerdLog} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(h.SaveLogs, filepath.Base(p)), b, 0o644); err != nil {
			return fmt.Errorf("save logs: %w", err)
		}
	}
	return nil
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

// cleanStale undoes what a killed run left: its processes (found by the
// root in their command line) and everything under them, its mounts, its
// root, and the host paths it recorded as created.
func (h *Host) cleanStale() error {
	if left := h.killLeftovers(); len(left) > 0 {
		h.logf("killed processes of an earlier run: %v", left)
	}
	if err := unmountUnder(h.Root); err != nil {
		return err
	}
	if b, err := os.ReadFile(createdRecord(h.Root)); err == nil {
		for _, p := range strings.Fields(string(b)) {
			_ = os.RemoveAll(p)
		}
	}
	_ = removeKubepodsCgroups()
	if err := os.RemoveAll(h.Root); err != nil {
		return fmt.Errorf("e2e host: remove %s: %w", h.Root, err)
	}
	return nil
}

func createdRecord(root string) string { return root + ".created" }

// recordHostPaths notes which host paths (or which of their ancestors)
// are missing now, so teardown removes what this run created and nothing
// else; the list is also written beside the root for a later run to clean
// if this one is killed.
func (h *Host) recordHostPaths() error {
	seen := map[string]bool{}
	for _, p := range hostPaths {
		top := ""
		for d := p; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
				top = d
			}
		}
		if top != "" && !seen[top] {
			seen[top] = true
			h.created = append(h.created, top)
		}
	}
	return os.WriteFile(createdRecord(h.Root), []byte(strings.Join(h.created, "\n")+"\n"), 0o644)
}

// unmountUnder unmounts every mount point at or under root, deepest first
// (lazily when a plain unmount fails).
func unmountUnder(root string) error {
	for i := 0; i < 5; i++ {
		mps, err := mountsUnder(root)
		if err != nil || len(mps) == 0 {
			return err
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, 0); err != nil {
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	}
	mps, err := mountsUnder(root)
	if err == nil && len(mps) > 0 {
		return fmt.Errorf("still mounted under %s: %v", root, mps)
	}
	return err
}

func mountsUnder(root string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == root || strings.HasPrefix(mp, root+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeKubepodsCgroups removes kubelet's kubepods cgroups (cgroupfs
// driver) in every hierarchy, leaves first. A cgroup that still has
// processes cannot be removed: that is an error.
func removeKubepodsCgroups() error {
	tops, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fi, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && fi.IsDir() {
		tops = append(tops, "/sys/fs/cgroup/kubepods")
	}
	var failed []string
	for _, top := range tops {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				failed = append(failed, dirs[i]+": "+err.Error())
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("kubepods cgroups not removed: %v", failed)
	}
	return nil
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

// parentOf is pid's parent (0 when it cannot be read).
func parentOf(pid int) int {
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
