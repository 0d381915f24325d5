package etcdcluster

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// put writes k = v, retrying for 30 s: right after a member is killed or
// paused the others may first have to elect a leader.
func put(t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, k, v)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s: no success in 30s: %v", k, err)
		}
		t.Logf("put %s: %v (retrying)", k, err)
		time.Sleep(200 * time.Millisecond)
	}
}

// get reads k linearizably (the default) through cli.
func get(t *testing.T, cli *clientv3.Client, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// alive reports whether pid exists (a zombie counts as gone only once
// reaped, which Kill waits for).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// TestThreeMembersKillRestart: three members agree on a key; with one
// killed the other two keep quorum and take writes; restarted on its own
// data, the killed member rejoins and serves the write it missed.
func TestThreeMembersKillRestart(t *testing.T) {
	c := Start(t, 3, "3.6")
	if len(c.Members) != 3 || len(c.Endpoints()) != 3 {
		t.Fatalf("members %d, endpoints %v, want 3", len(c.Members), c.Endpoints())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ml, err := c.Client(t).MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 3 {
		t.Fatalf("member list has %d members, want 3: %v", len(ml.Members), ml.Members)
	}
	put(t, c.Client(t, c.Members[0]), "k", "v1")
	for _, m := range c.Members {
		if got := get(t, c.Client(t, m), "k"); got != "v1" {
			t.Fatalf("%s reads k = %q, want v1", m.Name, got)
		}
	}

	victim := c.Members[2]
	pid := victim.Pid()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if victim.Running() || alive(pid) {
		t.Fatalf("%s (pid %d) still there after Kill", victim.Name, pid)
	}
	put(t, c.Client(t, c.Members[0], c.Members[1]), "k", "v2") // quorum of 2 of 3

	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	if victim.Pid() == pid {
		t.Fatalf("%s restarted with the same pid %d", victim.Name, pid)
	}
	// Linearizable read through the restarted member alone: it answers only
	// once it has rejoined and applied up to the leader's commit index.
	if got := get(t, c.Client(t, victim), "k"); got != "v2" {
		t.Fatalf("restarted %s reads k = %q, want v2 (the write it missed)", victim.Name, got)
	}
	st, err := c.Client(t).Status(ctx, victim.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader == 0 {
		t.Fatalf("restarted %s knows no leader", victim.Name)
	}
	if err := victim.Start(); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("Start of a running member = %v, want already running", err)
	}
}

// TestPauseResume: a paused member answers nothing; resumed, it answers
// again.
func TestPauseResume(t *testing.T) {
	c := Start(t, 3, "3.6")
	m := c.Members[1]
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := c.Client(t, m).Status(ctx, m.ClientURL)
	cancel()
	if err == nil {
		t.Fatalf("paused %s answered its status", m.Name)
	}
	put(t, c.Client(t, c.Members[0], c.Members[2]), "k", "v") // the other two keep quorum
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c.Client(t, m), "k"); got != "v" {
		t.Fatalf("resumed %s reads k = %q, want v", m.Name, got)
	}
}

// TestCleanupKillsEverything: after the cleanup of a sub-test no member
// process is left, paused ones included.
func TestCleanupKillsEverything(t *testing.T) {
	var pids []int
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, 2, "3.6")
		for _, m := range c.Members {
			pids = append(pids, m.Pid())
		}
		if err := c.Members[0].Pause(); err != nil {
			t.Fatal(err)
		}
	})
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d left after cleanup", pid)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("pids %v, want 2", pids)
	}
}

// TestKillTwiceAndSignalsOnStopped: Kill of a stopped member is a no-op;
// Pause of a stopped member is a clear error.
func TestKillTwiceAndSignalsOnStopped(t *testing.T) {
	c := Start(t, 1, "3.6")
	m := c.Members[0]
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := m.Kill(); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
	if err := m.Pause(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("Pause of a killed member = %v, want not running", err)
	}
	if _, err := os.Stat(m.DataDir); err != nil {
		t.Fatalf("data dir: %v", err)
	}
}
