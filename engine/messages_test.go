package engine

import (
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// TestDescribeActive: the wait-active event says what it waits for; kube-vip
// has no health endpoint, so it waits for kube-vip to run.
func TestDescribeActive(t *testing.T) {
	st, err := nodestate.Load("../testdata/states/default-vip.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vip, err := manifest.Target(st, nodestate.KubeVIP)
	if err != nil {
		t.Fatal(err)
	}
	if got := describeActive(vip); got != "kube-vip to run" {
		t.Errorf("kube-vip: %q, want %q", got, "kube-vip to run")
	}
	tg := proc.Target{Name: "etcd", Health: "http://127.0.0.1:2381/health"}
	if got, want := describeActive(tg), "etcd to answer http://127.0.0.1:2381/health"; got != want {
		t.Errorf("etcd: %q, want %q", got, want)
	}
}

// TestWriteMessage: a step's write event says what happened to the file.
func TestWriteMessage(t *testing.T) {
	for _, c := range []struct {
		p     journal.Phase
		wrote bool
		want  string
	}{
		{journal.PhaseApplying, true, "wrote etcd manifest"},
		{journal.PhaseApplying, false, "manifest already written (before an interruption)"},
		{journal.PhaseRollingBack, true, "wrote etcd manifest"},
		{journal.PhaseRollingBack, false, "manifest put back by the snapshot restore"},
	} {
		if got := writeMessage(c.p, "etcd", c.wrote); got != c.want {
			t.Errorf("writeMessage(%s, %v) = %q, want %q", c.p, c.wrote, got, c.want)
		}
	}
}

// TestWaitingMessage: a waiting node names the holder, or, when the lock's
// holder has not written who it is (another waiter holding it for a
// moment, as seen while a node was cut off), says so instead of naming an
// empty node at the zero time.
func TestWaitingMessage(t *testing.T) {
	since := time.Date(2026, 12, 4, 12, 31, 14, 0, time.UTC)
	if got, want := waitingMessage(cluster.Holder{Node: "node-3", Kind: "upgrade", Since: since}), "waiting for node node-3 to finish its upgrade (it holds the rollout lock since 2026-12-04T12:31:14Z)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := waitingMessage(cluster.Holder{}), "waiting for the rollout lock (held by a node that has not said who it is yet)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
