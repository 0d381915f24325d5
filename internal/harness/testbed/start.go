package testbed

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// TB is the part of testing.TB that Start uses; *testing.T and *testing.B
// satisfy it. Package testbed does not import testing, so the demo, which
// brings a node up with StartNode, links no test framework.
type TB interface {
	Helper()
	TempDir() string
	Cleanup(func())
	Failed() bool
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Start brings up a node for t (see StartNode) and registers its Stop with
// t.Cleanup; a failure to start or a process left behind fails t.
func Start(t TB, opts Options) *Node {
	t.Helper()
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(tbWriter{t}, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n, err := StartNode(ctx, opts)
	if n != nil {
		t.Cleanup(func() {
			if err := n.Stop(); err != nil {
				t.Errorf("testbed teardown: %v", err)
			}
			if t.Failed() {
				n.dumpLogs(t)
			}
		})
	}
	if err != nil {
		t.Fatalf("testbed: %v", err)
	}
	return n
}

// tbWriter logs each write to t, as one line without its newline.
type tbWriter struct{ t TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// dumpLogs logs the tails of the kubelet stand-in's log and of every
// container log.
func (n *Node) dumpLogs(t TB) {
	if b, err := os.ReadFile(n.KubeletLog); err == nil {
		t.Logf("kubelet stand-in log %s:\n%s", n.KubeletLog, tail(b, 200))
	}
	logs, _ := filepath.Glob(filepath.Join(n.KubeletDir, "logs", "*", "*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			t.Logf("container log %s:\n%s", l, tail(b, 40))
		}
	}
}
