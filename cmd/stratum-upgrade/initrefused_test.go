package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/cli"
)

// TestRefusedInitLeavesNothing: init of a node another tool brought up,
// with a state whose etcd health port nothing listens on, changes etcd's
// running manifest: the transaction's pre-flight check refuses it (exit 1,
// "nothing was written"). Nothing may be left behind: no journal, no state
// directory, so that init with the right state then imports it (before
// the fix the refused state was imported, and the second init was refused
// because the journal already held a node state).
func TestRefusedInitLeavesNothing(t *testing.T) {
	n, c := startCLINode(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	bad := n.State.Clone()
	bad.Ports.EtcdMetrics = port // nothing answers etcd's health there
	badFile := filepath.Join(n.Root, "node-bad.yaml")
	if err := bad.Save(badFile); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := c.su("init", "--state="+badFile)
	if code != cli.ExitError {
		t.Fatalf("init of a state whose etcd does not answer: exit %d, want %d\n%s%s", code, cli.ExitError, out, errOut)
	}
	contains(t, "refused init", errOut, "EtcdHealth", "nothing was written")
	if _, err := os.Lstat(c.stateDir); !os.IsNotExist(err) {
		t.Errorf("the refused init left the state directory %s behind (%v)", c.stateDir, err)
	}
	out = c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	contains(t, "init after the refusal", out, "imported node state of ")
}
