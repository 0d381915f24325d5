package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// TestForeignEtcdBesideTheNodes runs a real etcd that is not the node's
// (the test's child, outside every pod cgroup) beside the node's etcd, and
// scopes every process look-up to the test process, whose tree holds both:
// status shows the node's etcd only and lists the other as foreign, and a
// transaction that replaces etcd commits, the foreign etcd neither taken
// for the old process nor for its replacement. It runs alone (not
// parallel): another test's node in the same tree would be a second node
// etcd.
func TestForeignEtcdBesideTheNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default.yaml"})
	if n.CgroupParent == "" {
		t.Skip("the kubelet stand-in has no pod cgroups here (needs root and a writable cgroup v2 hierarchy)")
	}
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	node, err := n.Scanner.PIDs("etcd")
	if err != nil || len(node) != 1 {
		t.Fatalf("the node's etcd: %v, %v; want one process", node, err)
	}
	foreign := startForeignEtcd(t)
	scope := "--proc-scope=" + strconv.Itoa(os.Getpid())

	var rep struct {
		Components []struct {
			Component string
			Processes []struct{ PID int }
			Foreign   []struct{ PID int }
		}
	}
	out := c.want(cli.ExitOK, "status", "-o", "json", scope)
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	pids := func(ps []struct{ PID int }) (out []int) {
		for _, p := range ps {
			out = append(out, p.PID)
		}
		return out
	}
	found := false
	for _, comp := range rep.Components {
		if comp.Component != "etcd" {
			if slices.Contains(pids(comp.Processes), foreign) || len(comp.Foreign) > 0 {
				t.Errorf("status: %s lists %v and foreign %v", comp.Component, pids(comp.Processes), pids(comp.Foreign))
			}
			continue
		}
		found = true
		if got := pids(comp.Processes); !slices.Equal(got, []int{node[0].PID}) {
			t.Errorf("status: etcd processes %v, want the node's only [%d]", got, node[0].PID)
		}
		if got := pids(comp.Foreign); !slices.Equal(got, []int{foreign}) {
			t.Errorf("status: etcd foreign %v, want [%d]", got, foreign)
		}
	}
	if !found {
		t.Fatalf("status -o json has no etcd:\n%s", out)
	}
	out = c.want(cli.ExitOK, "status", scope)
	contains(t, "status", out, fmt.Sprintf("foreign:      etcd: %d/", foreign))

	out = c.want(cli.ExitOK, "restart", "etcd", scope)
	contains(t, "restart output", out, "committed")
	after, err := n.Scanner.PIDs("etcd")
	if err != nil || len(after) != 1 || after[0].PID == node[0].PID || after[0].PID == foreign {
		t.Fatalf("the node's etcd after the restart: %v, %v; want one new process", after, err)
	}
	if err := syscall.Kill(foreign, 0); err != nil {
		t.Fatalf("the foreign etcd did not survive the transaction: %v", err)
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
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
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
			b, _ := os.ReadFile(logf.Name())
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
