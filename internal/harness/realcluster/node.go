package realcluster

// A node: its network namespace (net.go), a holder process that is the
// init of its PID namespace and owns its mount and UTS namespaces, in
// which NodePaths are bound to the node's own directories and /proc is the
// node's own; and the daemons started inside them all by nsenter.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
)

// NodePaths are the host paths each node sees bound to a directory of its
// own (Node.HostPath): kubeadm's fixed paths, and those containerd (its
// opt plugin's /opt/containerd), kubelet and the control-plane pods'
// DirectoryOrCreate volumes (kube-controller-manager's flexvolume
// directory) write outside their configured roots, CNI's cache and
// leases (/var/lib/cni), /etc/pki (kubeadm upgrade plan made it on the
// host: kubeadm's CA directories of RHEL hosts), and stratum-upgrade's
// default state and config directories.
var NodePaths = []string{
	"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd",
	"/run/containerd", "/var/log/pods", "/var/log/containers",
	"/opt/containerd", "/usr/libexec/kubernetes", "/var/lib/cni", "/etc/pki",
	"/var/lib/stratum", "/etc/stratum",
}

// Node is one control-plane node: everything it runs is inside its
// network namespace and its holder's mount namespace.
type Node struct {
	Index   int
	Name    string // cp-1, also its hostname
	Address string // on Bridge
	NetNS   string
	// Dir holds the node's directories (one per NodePaths entry) and its
	// containerd's root, config and logs.
	Dir string
	// ContainerdSock is its containerd's socket as the host sees it.
	ContainerdSock string
	// CgroupRoot is kubelet's cgroupRoot, made in every hierarchy.
	CgroupRoot string

	holder  *daemon
	daemons map[string]*daemon
	logf    func(string, ...any)
}

// HostPath is where the node's path p (one of NodePaths, or under one)
// is on the host.
func (n *Node) HostPath(p string) string {
	for _, np := range NodePaths {
		if p == np || strings.HasPrefix(p, np+"/") {
			return filepath.Join(n.Dir, strings.ReplaceAll(strings.TrimPrefix(np, "/"), "/", "-"), strings.TrimPrefix(p, np))
		}
	}
	panic("realcluster: " + p + " is not a node path")
}

// daemon is a process the harness started, in its own process group, with
// SIGKILL as its parent-death signal. In a node it is nsenter, which forks
// the program into the node's PID namespace and waits for it (passing on
// its exit status, not signals): signals go to the program itself (PID).
type daemon struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	// forked is set when cmd forks the program as its only child.
	forked bool
	// argv is the program's command line (without nsenter's).
	argv []string
}

// PID is the program's host pid, or 0 once it is gone (or, forked, not
// yet there).
func (d *daemon) PID() int {
	if !d.alive() {
		return 0
	}
	if !d.forked {
		return d.cmd.Process.Pid
	}
	return onlyChild(d.cmd.Process.Pid)
}

// onlyChild is the first child of pid (/proc/<pid>/task/<pid>/children),
// or 0.
func onlyChild(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	c, _ := strconv.Atoi(f[0])
	return c
}

// signal sends sig to the program (not to nsenter, which would leave it
// running).
func (d *daemon) signal(sig syscall.Signal) {
	if pid := d.PID(); pid > 0 {
		_ = syscall.Kill(pid, sig)
	}
}

func (d *daemon) alive() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, then SIGKILL after grace.
func (d *daemon) stop(grace time.Duration) {
	if !d.alive() {
		return
	}
	d.signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return
	case <-time.After(grace):
	}
	d.signal(syscall.SIGKILL)
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// spawn starts argv with its output appended to logPath.
func spawn(name, dir, logPath string, argv ...string) (*daemon, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("real cluster: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := kubeletsim.Spawn(cmd); err != nil {
		return nil, fmt.Errorf("real cluster: start %s: %w", name, err)
	}
	d := &daemon{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	return d, nil
}

// startHolder starts the holder: in the node's network namespace, new
// PID, mount (private propagation) and UTS namespaces, a shell that is the
// PID namespace's init with the node's own /proc mounted (unshare
// --mount-proc), sets the hostname to the node's name, binds NodePaths and
// then reaps orphans (a container's shim is reparented to it) until
// killed; unshare's --kill-child ends it with the harness. Every process
// of the node enters its namespaces (Command), so a process of the node
// sees only the node's processes in /proc, as on a machine of its own.
func (n *Node) startHolder() error {
	var script strings.Builder
	script.WriteString("set -e\nhostname " + n.Name + "\n")
	for _, p := range NodePaths {
		src := n.HostPath(p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("real cluster: %w", err)
		}
		fmt.Fprintf(&script, "mount --bind %s %s\n", src, p)
	}
	ready := filepath.Join(n.Dir, "holder.ready")
	// dash's wait reaps any child, those it did not start included.
	fmt.Fprintf(&script, "touch %s\ntrap 'exit 0' TERM\nwhile :; do sleep 1 & wait; done\n", ready)
	d, err := spawn("holder", n.Dir, filepath.Join(n.Dir, "holder.log"),
		"nsenter", "--net=/run/netns/"+n.NetNS, "--", "unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc",
		"--propagation", "private", "--", "sh", "-c", script.String())
	if err != nil {
		return err
	}
	d.forked = true
	n.holder = d
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil && d.PID() > 0 {
			return nil
		}
		if !d.alive() || time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(n.Dir, "holder.log"))
			return fmt.Errorf("real cluster: node %s: namespace holder not ready: %s", n.Name, strings.TrimSpace(string(b)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// HolderPID is the host pid of the node's init, which owns its
// namespaces.
func (n *Node) HolderPID() int { return n.holder.PID() }

// enter is nsenter's argv entering every namespace of the node.
func (n *Node) enter() []string {
	return []string{"nsenter", "-t", strconv.Itoa(n.HolderPID()), "-n", "-m", "-u", "-p", "--"}
}

// Command is name with args run inside the node's namespaces. Its
// Process is nsenter's (see daemon): use InnerPID for the program's.
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(n.enter()[0], append(append(n.enter()[1:], name), args...)...)
	cmd.Dir = n.Dir
	return cmd
}

// InnerPID is the host pid of the program a started Command runs (nsenter's
// child), or 0 while there is none.
func InnerPID(cmd *exec.Cmd) int {
	if cmd.Process == nil {
		return 0
	}
	return onlyChild(cmd.Process.Pid)
}

// Start starts name (a daemon of the node: containerd, kubelet) inside
// its namespaces, logging to <Dir>/<name>.log.
func (n *Node) Start(name string, argv ...string) error {
	if d := n.daemons[name]; d != nil && d.alive() {
		return fmt.Errorf("real cluster: node %s: %s already runs (pid %d)", n.Name, name, d.PID())
	}
	d, err := spawn(name, n.Dir, n.Log(name), append(n.enter(), argv...)...)
	if err != nil {
		return err
	}
	d.forked = true
	d.argv = argv
	n.daemons[name] = d
	return nil
}

// Log is the path of daemon name's log.
func (n *Node) Log(name string) string { return filepath.Join(n.Dir, name+".log") }

// Alive reports whether daemon name runs.
func (n *Node) Alive(name string) bool {
	d := n.daemons[name]
	return d != nil && d.alive()
}

// PIDs lists every process in the node's network namespace: its daemons,
// their shims and containers (every pod is hostNetwork), and the holder.
func (n *Node) PIDs() []int { return netnsPIDs(n.NetNS) }

// RSS is the resident memory of every process of the node, summed.
func (n *Node) RSS() int64 {
	var sum int64
	for _, pid := range n.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				sum += kb * 1024
			}
		}
	}
	return sum
}

// tail is the last n lines of the file at path ("" when unreadable).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastLines(string(b), n)
}

// lastLines is the last n lines of text.
func lastLines(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// SaveLogs copies every node's logs (kubeadm, kubelet, containerd, the
// holder) into dst/<node>/, for a failed test to keep after Stop removes
// Dir.
func (c *Cluster) SaveLogs(dst string) error {
	for _, n := range c.Nodes {
		logs, _ := filepath.Glob(filepath.Join(n.Dir, "*.log"))
		if err := os.MkdirAll(filepath.Join(dst, n.Name), 0o755); err != nil {
			return fmt.Errorf("real cluster: save logs: %w", err)
		}
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				continue
			}
			if err := os.WriteFile(filepath.Join(dst, n.Name, filepath.Base(l)), b, 0o644); err != nil {
				return fmt.Errorf("real cluster: save logs: %w", err)
			}
		}
	}
	return nil
}
