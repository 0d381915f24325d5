// Package etcdcluster runs a real multi-member etcd cluster for tests: N
// etcd processes (binaries from etcdbuild) on 127.0.0.1 with plain http,
// free ports and data directories under the test's temporary directory, no
// kubelet. A test can kill, restart, pause and resume any member.
//
// Every process is started with Pdeathsig SIGKILL (through
// kubeletsim.Spawn) and killed and reaped at the test's cleanup, so no
// etcd outlives its test.
package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// HealthTimeout bounds each wait for members to answer /health: Start's
// wait for the whole cluster and Member.Start's wait for one member.
const HealthTimeout = 60 * time.Second

// Cluster is a running etcd cluster; Members are in the order of their
// names (m0, m1, ...).
type Cluster struct {
	Members []*Member
}

// Member is one etcd process of a Cluster. Name, ClientURL, PeerURL and
// DataDir stay the same across Kill and Start.
type Member struct {
	Name, ClientURL, PeerURL, DataDir string

	binary         string
	initialCluster string
	logPath        string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been reaped
}

// Start starts n members of the etcd build version (any name
// etcdbuild.Lookup takes: "3.6", "v3.6.16", an image) and waits until every
// member answers /health with {"health":"true"}, or fails t after
// HealthTimeout with each member's log tail. t.Cleanup kills and reaps
// every process.
func Start(t testing.TB, n int, version string) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdcluster: %d members: want at least 1", n)
	}
	bin, err := etcdbuild.Binary(version)
	if err != nil {
		t.Fatalf("etcdcluster: etcd %s: %v", version, err)
	}
	ports, err := testbed.FreePorts(2 * n)
	if err != nil {
		t.Fatalf("etcdcluster: %v", err)
	}
	root := t.TempDir()
	c := &Cluster{}
	var peers []string
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			binary:    bin,
		}
		m.DataDir = filepath.Join(root, m.Name+".etcd")
		m.logPath = filepath.Join(root, m.Name+".log")
		peers = append(peers, m.Name+"="+m.PeerURL)
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.initialCluster = strings.Join(peers, ",")
	}
	t.Cleanup(func() {
		for _, m := range c.Members {
			if err := m.Kill(); err != nil {
				t.Errorf("etcdcluster: cleanup: %v", err)
			}
		}
	})
	for _, m := range c.Members {
		if err := m.spawn("new"); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(HealthTimeout)
	for _, m := range c.Members {
		if err := m.waitHealthy(deadline); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Endpoints is every member's client URL, in member order.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// WaitHealthy waits, at most HealthTimeout, until every running member
// answers /health as Start does: etcd answers it false while the member
// knows no leader ("RAFT NO LEADER") and fails its linearizable read while
// the leader it knows is gone. After a member was killed the survivors may
// spend a while electing one (longer on a loaded machine); a test that
// means "one member down" rather than "an election" waits it out.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(HealthTimeout)
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		if err := m.waitHealthy(deadline); err != nil {
			t.Fatal(err)
		}
	}
}

// Client is a client of the given members (every member when none is
// given), closed when t ends.
func (c *Cluster) Client(t testing.TB, members ...*Member) *clientv3.Client {
	t.Helper()
	eps := c.Endpoints()
	if len(members) > 0 {
		eps = nil
		for _, m := range members {
			eps = append(eps, m.ClientURL)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdcluster: client of %v: %v", eps, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Kill sends SIGKILL to the member's process and waits until it has been
// reaped. A member that is not running is left as it is (nil). A paused
// member is killed too (SIGKILL needs no SIGCONT).
func (m *Member) Kill() error {
	m.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("etcdcluster: kill %s (pid %d): %w", m.Name, cmd.Process.Pid, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("etcdcluster: %s (pid %d) not reaped 10s after SIGKILL", m.Name, cmd.Process.Pid)
	}
}

// Start starts the member again on its data directory and ports
// (initial-cluster-state existing) and waits until it answers /health, at
// most HealthTimeout. A member that is running is refused.
func (m *Member) Start() error {
	if m.Running() {
		return fmt.Errorf("etcdcluster: start %s: already running (pid %d)", m.Name, m.Pid())
	}
	if err := m.spawn("existing"); err != nil {
		return err
	}
	return m.waitHealthy(time.Now().Add(HealthTimeout))
}

// Pause stops the member's process with SIGSTOP: it keeps its ports and
// answers nothing until Resume.
func (m *Member) Pause() error { return m.signal(syscall.SIGSTOP) }

// Resume continues a paused member with SIGCONT.
func (m *Member) Resume() error { return m.signal(syscall.SIGCONT) }

// Running reports whether the member's process was started and has not
// exited.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Pid is the member's current (or last) process id, 0 before any start.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Log is the member's log, every run of it.
func (m *Member) Log() string {
	b, err := os.ReadFile(m.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

func (m *Member) signal(sig syscall.Signal) error {
	if !m.Running() {
		return fmt.Errorf("etcdcluster: %v to %s: not running", sig, m.Name)
	}
	if err := syscall.Kill(m.Pid(), sig); err != nil {
		return fmt.Errorf("etcdcluster: %v to %s (pid %d): %w", sig, m.Name, m.Pid(), err)
	}
	return nil
}

// spawn starts the member's process; state is the initial-cluster-state.
func (m *Member) spawn(state string) error {
	logFile, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("etcdcluster: %s log: %w", m.Name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(m.binary,
		"--name="+m.Name, "--data-dir="+m.DataDir,
		"--listen-client-urls="+m.ClientURL, "--advertise-client-urls="+m.ClientURL,
		"--listen-peer-urls="+m.PeerURL, "--initial-advertise-peer-urls="+m.PeerURL,
		"--initial-cluster="+m.initialCluster, "--initial-cluster-state="+state,
		"--initial-cluster-token=etcdcluster")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := kubeletsim.Spawn(cmd); err != nil {
		return fmt.Errorf("etcdcluster: start %s: %w", m.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	m.mu.Lock()
	m.cmd, m.exited = cmd, exited
	m.mu.Unlock()
	return nil
}

// waitHealthy polls the member's /health until it reports healthy, the
// process exits, or deadline passes.
func (m *Member) waitHealthy(deadline time.Time) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	last := "no answer yet"
	for {
		m.mu.Lock()
		exited := m.exited
		m.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("etcdcluster: %s exited while waiting for it to be healthy:\n%s", m.Name, tail(m.Log()))
		default:
		}
		if ok, what := health(hc, m.ClientURL); ok {
			return nil
		} else {
			last = what
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcdcluster: %s at %s not healthy by the deadline (last: %s):\n%s", m.Name, m.ClientURL, last, tail(m.Log()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// health asks url's /health; ok when etcd answers 200 with health "true".
func health(hc *http.Client, url string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	body := b.String()
	if resp.StatusCode == http.StatusOK && strings.Contains(body, `"health":"true"`) {
		return true, ""
	}
	return false, fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(body))
}

// tail is the last 30 lines of a log.
func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
