package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/internal/harness/converge"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// checkConverged opens n's journal and asserts converge.Check's
// invariants (the engine's crash matrix's, here against the real kubelet)
// after a transaction ended. Beyond the test bed, because a real kubelet
// runs images: each component's process runs the image its manifest names
// (the image's ImageEnv in its environment). The scan is host-wide; the
// processes counted are those in this Host's containers.
func checkConverged(t *testing.T, n *node, want engine.Outcome, before map[string][]byte) *journal.Txn {
	t.Helper()
	j, err := journal.Open(filepath.Join(n.stateDir, "stratum.db"), journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	return converge.Check(t, converge.Node{
		ManifestDir: n.h.ManifestDir,
		Scanner:     proc.Host(),
		PIDs:        n.h.ComponentPIDs,
		Wait:        60 * time.Second,
		Active:      30 * time.Second,
		Image:       processImage,
	}, j, journal.Phase(want), before)
}

// processImage is the ImageEnv value in pid's environment.
func processImage(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, ImageEnv+"="); ok {
			return v
		}
	}
	return ""
}

// journalState is the node state n's journal holds now.
func (n *node) journalState(t *testing.T) *nodestate.NodeState {
	t.Helper()
	return converge.JournalState(t, filepath.Join(n.stateDir, "stratum.db"))
}
