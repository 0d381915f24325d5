package manifest_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestSweptLeftoverGivesThePodBack runs the store against the kubelet
// stand-in with a relist far away: a visible leftover that took the
// scheduler's pod over is swept, and the real manifest's pod must run again
// at once, not after the next relist (kubelet deletes the pod key a removed
// file last yielded).
func TestSweptLeftoverGivesThePodBack(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the test bed")
	}
	n := testbed.Start(t, testbed.Options{Relist: time.Hour})
	real, err := n.Store.Read(nodestate.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	// A leftover of an older writer with the same pod name, different content.
	leftover := strings.Replace(string(real), "--leader-elect=true", "--leader-elect=false", 1)
	if err := os.WriteFile(filepath.Join(n.ManifestDir, "kube-scheduler.yaml.tmp"), []byte(leftover), 0o600); err != nil {
		t.Fatal(err)
	}
	tg, _ := manifest.Target(n.State, nodestate.Scheduler)
	ctx := context.Background()
	// The leftover's pod runs (its creation event made kubelet parse it).
	if err := waitArgv(n, tg.Binary, "--leader-elect=false", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Store.WriteAll(n.State); err != nil {
		t.Fatal(err)
	}
	if err := waitArgv(n, tg.Binary, "--leader-elect=true", 10*time.Second); err != nil {
		t.Fatalf("after the sweep the real manifest's pod did not come back before the relist: %v", err)
	}
	if err := n.Scanner.WaitActive(ctx, tg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// waitArgv waits until a process of binary runs with arg in its argv.
func waitArgv(n *testbed.Node, binary, arg string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ps, err := n.Scanner.PIDs(binary)
		if err != nil {
			return err
		}
		for _, p := range ps {
			b, _ := os.ReadFile(filepath.Join("/proc", itoa(p.PID), "cmdline"))
			if strings.Contains(string(b), arg+"\x00") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return &timeoutErr{binary + " with " + arg}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type timeoutErr struct{ what string }

func (e *timeoutErr) Error() string { return "timed out waiting for " + e.what }

func itoa(n int) string { return strconv.Itoa(n) }
