package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/proc"
)

// TestForeignEtcdUnderRealKubelet runs a real etcd that is not the node's
// (the test's child, outside every pod cgroup) beside the etcd kubelet
// runs for the node's static pod. stratum-upgrade's scan is host-wide (no
// --proc-scope), so it sees both: status shows kubelet's etcd only and the
// other as foreign, and a restart of etcd commits, the foreign etcd
// neither waited for nor taken for the replacement.
func TestForeignEtcdUnderRealKubelet(t *testing.T) {
	requireE2E(t)
	ks, _, err := kubeletsFor()
	if err != nil {
		t.Fatal(err)
	}
	h := startHost(t, ks[0]) // the run's newest kubelet
	n := resetNode(t, h)     // before the foreign etcd: it waits for a quiet machine
	node, err := h.ComponentPIDs("etcd")
	if err != nil || len(node) != 1 {
		t.Fatalf("kubelet's etcd: %v, %v; want one process", node, err)
	}
	if pl := proc.Host().Place(node[0].PID); pl != proc.StaticPod {
		t.Fatalf("kubelet's etcd (pid %d) is placed %v, want in a static pod's cgroup", node[0].PID, pl)
	}
	foreign := startForeignEtcd(t)

	r := n.run(t, runOpts{}, "status")
	if r.code != 0 {
		t.Fatalf("status exited %d:\n%s", r.code, r.output())
	}
	var rep struct {
		Components []struct {
			Component string
			Processes []proc.Process
			Foreign   []proc.Process
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, r.stdout)
	}
	pids := func(ps []proc.Process) (out []int) {
		for _, p := range ps {
			out = append(out, p.PID)
		}
		return out
	}
	found := false
	for _, c := range rep.Components {
		if c.Component != "etcd" {
			continue
		}
		found = true
		if got := pids(c.Processes); !slices.Equal(got, []int{node[0].PID}) {
			t.Errorf("status: etcd processes %v, want kubelet's only [%d]", got, node[0].PID)
		}
		if got := pids(c.Foreign); !slices.Equal(got, []int{foreign}) {
			t.Errorf("status: etcd foreign %v, want [%d]", got, foreign)
		}
	}
	if !found {
		t.Fatalf("status has no etcd:\n%s", r.stdout)
	}

	r = n.run(t, runOpts{}, "restart", "etcd")
	if r.code != 0 {
		t.Fatalf("restart etcd exited %d, want 0:\n%s", r.code, r.output())
	}
	checkConverged(t, n, engine.Committed, nil)
	after, err := h.ComponentPIDs("etcd")
	if err != nil || len(after) != 1 || after[0].PID == node[0].PID {
		t.Fatalf("kubelet's etcd after the restart: %v, %v; want one new process", after, err)
	}
	if err := syscall.Kill(foreign, 0); err != nil {
		t.Fatalf("the foreign etcd did not outlive the transaction: %v", err)
	}
}

// startForeignEtcd starts the real etcd 3.5 as the test's child on free
// loopback ports, waits until it serves, and returns its pid; cleanup
// kills it.
func startForeignEtcd(t *testing.T) int {
	t.Helper()
	bin, err := etcdbuild.Binary("3.5")
	if err != nil {
		t.Fatal(err)
	}
	ports, err := testbed.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dir := t.TempDir()
	logPath := filepath.Join(dir, "etcd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--name=foreign", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=foreign="+peer, "--initial-cluster-state=new")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("the foreign etcd exited:\n%s", b)
		default:
		}
		if resp, err := http.Get(client + "/health"); err == nil && resp.Body.Close() == nil && resp.StatusCode == http.StatusOK {
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the foreign etcd did not serve %s/health within 30s", client)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
