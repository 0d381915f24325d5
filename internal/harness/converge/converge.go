// Package converge asserts that a node converged after a transaction
// ended, for the engine's tests (the test bed's kubelet stand-in, the crash
// matrix) and the end-to-end tests (a real kubelet): Check.
package converge

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// Node is the node a transaction ran on, as Check sees it.
type Node struct {
	// ManifestDir is the static pod directory.
	ManifestDir string
	// Scanner waits for each component to be active and reads the clock
	// the process start times are in.
	Scanner *proc.Scanner
	// PIDs lists the processes running binary on this node; nil:
	// Scanner.PIDs.
	PIDs func(binary string) ([]proc.Process, error)
	// Wait bounds the wait for every component to be active; Active
	// bounds each component's.
	Wait, Active time.Duration
	// Image, if set, is the image process pid runs (as the runtime
	// recorded it): each component's process must run the image its
	// manifest names.
	Image func(pid int) string
}

// Check asserts the invariants of a node after a transaction ended (the
// crash matrix's, and every test's that runs one): no open transaction
// and the last one ended want (journal.PhaseCommitted or
// journal.PhaseRolledBack); the manifest directory holds exactly the
// roster's manifests and nothing else (no staging file, hidden or not);
// committed: every manifest is the render of the committed state with its
// on-disk restarted-at; rolled back: every manifest is the snapshot's
// (before), byte-identical for the components the transaction did not
// write and identical but for restarted-at for those it did; every
// component active; each component runs exactly one process, started
// after its manifest's last write, and (with n.Image) running the image
// its manifest names. It returns the last transaction.
func Check(t testing.TB, n Node, j *journal.Journal, want journal.Phase, before map[string][]byte) *journal.Txn {
	t.Helper()
	if open, err := j.OpenTxn(); err != nil || open != nil {
		t.Fatalf("a transaction is still open: %+v %v", open, err)
	}
	hist, err := j.History(1)
	if err != nil || len(hist) != 1 {
		t.Fatalf("history: %v %v", hist, err)
	}
	last := hist[0]
	if last.Phase != want {
		t.Fatalf("last transaction %s ended %s (%s), want %s", last.ID, last.Phase, last.Reason, want)
	}
	st, err := j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	now := Manifests(t, n.ManifestDir)
	roster := manifest.NamesFor(st)
	if len(now) != len(roster) {
		t.Errorf("manifest dir holds %d entries, want the %d of the roster: %v", len(now), len(roster), keys(now))
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
		case journal.PhaseCommitted:
			render, err := manifest.RenderBytes(st, prof, comp, manifest.RestartedAt(pod))
			if err != nil {
				t.Fatal(err)
			}
			if string(render) != string(got) {
				t.Errorf("%s is not the render of the committed state", comp)
			}
		case journal.PhaseRolledBack:
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
	ctx, cancel := context.WithTimeout(context.Background(), n.Wait)
	defer cancel()
	for _, comp := range roster {
		tg, _ := manifest.Target(st, comp)
		if err := n.Scanner.WaitActive(ctx, tg, n.Active); err != nil {
			t.Errorf("%s not active after the transaction: %v", comp, err)
		}
		checkProcesses(t, n, comp, tg, images[comp])
	}
	return &last
}

// checkProcesses asserts comp runs one process on the node, started after
// its manifest was last written (clock-tick resolution), and, with
// n.Image, running image.
func checkProcesses(t testing.TB, n Node, comp string, tg proc.Target, image string) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(n.ManifestDir, manifest.FileName(comp)))
	if err != nil {
		t.Errorf("%s: %v", comp, err)
		return
	}
	m, err := n.Scanner.Mark()
	if err != nil {
		t.Fatal(err)
	}
	pids := n.PIDs
	if pids == nil {
		pids = n.Scanner.PIDs
	}
	ps, err := pids(tg.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Errorf("%s runs %d processes on the node, want 1: %v", comp, len(ps), ps)
	}
	for _, p := range ps {
		started := time.Now().Add(-time.Duration(m.Ticks-p.StartTicks) * 10 * time.Millisecond)
		if started.Before(fi.ModTime().Add(-20 * time.Millisecond)) {
			t.Errorf("%s pid %d started at %s, before its manifest was last written at %s", comp, p.PID, started.Format(time.StampMilli), fi.ModTime().Format(time.StampMilli))
		}
		if n.Image == nil {
			continue
		}
		if got := n.Image(p.PID); got != image {
			t.Errorf("%s pid %d runs image %q, its manifest names %q", comp, p.PID, got, image)
		}
	}
}

// Manifests returns the bytes of every entry of the manifest directory
// dir, hidden ones included.
func Manifests(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// JournalState is the node state the journal at path holds, opened
// read-only once the command that wrote it has exited; an error fails t.
func JournalState(t *testing.T, path string) *nodestate.NodeState {
	t.Helper()
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := j.NodeState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
