package engine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestRetentionAfterFailedRollbacks: seven upgrades whose rollback fails
// too (the old scheduler exits at start once the rollback begins) leave
// the default five snapshots, not all seven: retention runs
// after every transaction that ends, not only after a commit or a
// rollback that worked (issue 39, item 7).
func TestRetentionAfterFailedRollbacks(t *testing.T) {
	n := newMemNode(t)
	old := n.st.Images[nodestate.Scheduler]
	n.onEvent = func(ev Event) {
		if ev.Step == "rollback" {
			n.k.SetImageMode(old, standin.ModeExitAtStart)
		}
	}
	root := filepath.Join(n.root, "state", "snapshots")
	for i := range 7 {
		res, err := n.engine(nil).Run(t.Context(), release(n.st, false, nodestate.Scheduler, standin.ModeNeverListen), nil)
		if !errors.Is(err, ErrRollbackFailed) || res.Outcome != RollbackFailed {
			t.Fatalf("upgrade %d: %+v %v, want its rollback to fail", i+1, res, err)
		}
		// The scheduler healthy again for the next upgrade: a reboot
		// starts it afresh from its (restored) manifest.
		n.k.SetImageMode(old, standin.ModeHealthy)
		if err := n.k.Reboot(); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if len(left) != 5 {
		t.Fatalf("after 7 failed rollbacks %d snapshots remain, want the newest 5: %v", len(left), left)
	}
}
