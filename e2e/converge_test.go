package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/proc"
)

// checkConverged asserts the crash matrix's invariants (engine's
// checkConverged, here against the real kubelet) after a transaction
// ended: no open transaction and the last one ended want; the manifest
// directory holds exactly the roster's manifests and nothing else (no
// staging file, hidden or not); committed: every manifest is the render of
// the committed state with its on-disk restarted-at; rolled back: every
// manifest is the snapshot's (before), byte-identical for the components
// the transaction did not write and identical but for restarted-at for
// those it did; every component active; and every component's processes
// in this Host's containers started after its manifest's last write.
//
// Beyond the matrix, because a real kubelet runs images: each component
// runs exactly one process, and that process runs the image its manifest
// names (the image's ImageEnv in its environment).
func checkConverged(t *testing.T, n *node, want engine.Outcome, before map[string][]byte) *journal.Txn {
	t.Helper()
	j, err := journal.Open(filepath.Join(n.stateDir, "stratum.db"), journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if open, err := j.OpenTxn(); err != nil || open != nil {
		t.Fatalf("a transaction is still open: %+v %v", open, err)
	}
	hist, err := j.History(1)
	if err != nil || len(hist) != 1 {
		t.Fatalf("history: %v %v", hist, err)
	}
	last := hist[0]
	if string(last.Phase) != string(want) {
		t.Fatalf("last transaction %s ended %s (%s), want %s", last.ID, last.Phase, last.Reason, want)
	}
	st, err := j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	now := n.manifests(t)
	roster := manifest.NamesFor(st)
	if len(now) != len(roster) {
		t.Errorf("manifest dir holds %d entries, want the %d of the roster: %v", len(now), len(roster), mapKeys(now))
	}
	prof, err := manifest.LoadProfile(st)
	if err != nil {
		t.Fatal(err)
	}
	written := map[string]bool{}
	for _, c := range last.Changed {
		written[c] = true
	}
	images := map[string]string{}
	for _, comp := range roster {
		got, ok := now[manifest.FileName(comp)]
		if !ok {
			t.Errorf("%s has no manifest", comp)
			continue
		}
		pod, err := manifest.DecodePod(got)
		if err != nil {
			t.Fatalf("%s: %v", comp, err)
		}
		images[comp] = pod.Spec.Containers[0].Image
		switch want {
		case engine.Committed:
			render, err := manifest.RenderBytes(st, prof, comp, manifest.RestartedAt(pod))
			if err != nil {
				t.Fatal(err)
			}
			if string(render) != string(got) {
				t.Errorf("%s is not the render of the committed state", comp)
			}
		case engine.RolledBack:
			old := before[manifest.FileName(comp)]
			if !written[comp] {
				if string(old) != string(got) {
					t.Errorf("%s was not written by the upgrade but differs after the rollback", comp)
				}
				continue
			}
			a, _ := manifest.SetRestartedAt(old, "")
			b, _ := manifest.SetRestartedAt(got, "")
			if string(a) != string(b) {
				t.Errorf("%s differs from the snapshot beyond restarted-at:\n%s\n---\n%s", comp, old, got)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, comp := range roster {
		tg, _ := manifest.Target(st, comp)
		if err := proc.Host().WaitActive(ctx, tg, 30*time.Second); err != nil {
			t.Errorf("%s not active after the transaction: %v", comp, err)
		}
		checkProcesses(t, n, comp, tg, images[comp])
	}
	return &last
}

// checkProcesses asserts comp runs one process in the Host's containers,
// started after its manifest was last written (clock-tick resolution), and
// running image.
func checkProcesses(t *testing.T, n *node, comp string, tg proc.Target, image string) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(n.h.ManifestDir, manifest.FileName(comp)))
	if err != nil {
		t.Errorf("%s: %v", comp, err)
		return
	}
	m, err := proc.Host().Mark()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := n.h.ComponentPIDs(tg.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Errorf("%s runs %d processes in the node's containers, want 1: %v", comp, len(ps), ps)
	}
	for _, p := range ps {
		started := time.Now().Add(-time.Duration(m.Ticks-p.StartTicks) * 10 * time.Millisecond)
		if started.Before(fi.ModTime().Add(-20 * time.Millisecond)) {
			t.Errorf("%s pid %d started at %s, before its manifest was last written at %s", comp, p.PID, started.Format(time.StampMilli), fi.ModTime().Format(time.StampMilli))
		}
		if got := processImage(p.PID); got != image {
			t.Errorf("%s pid %d runs image %q, its manifest names %q", comp, p.PID, got, image)
		}
	}
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

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
