package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestRenderShadowedOnTestBed: on a live node where etcd.yaml.bak (a copy
// of etcd's manifest) shadows etcd and kube-scheduler's manifest is edited
// by hand, render and render --dry-run refuse (exit 1), naming the stray
// and the command that moves it, and write nothing; once it is moved,
// render changes the scheduler through a transaction (issue 37, J: it
// wrote every changed manifest at once).
func TestRenderShadowedOnTestBed(t *testing.T) {
	n, c := startCLINode(t)
	sched := filepath.Join(n.ManifestDir, "kube-scheduler.yaml")
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	next, edited := schedulerEdit(t, n.State)
	tgt, err := manifest.Target(next, nodestate.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	mark := markBeforeWrite(t, n)
	if err := os.WriteFile(sched, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.WaitReplaced(t.Context(), tgt, mark, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(n.ManifestDir, "etcd.yaml.bak")
	if err := os.WriteFile(stray, []byte(readFile(t, filepath.Join(n.ManifestDir, "etcd.yaml"))), 0o600); err != nil {
		t.Fatal(err)
	}
	before := manifests(t, n.ManifestDir)

	for _, args := range [][]string{{"render", "--dry-run"}, {"render"}} {
		code, out, errOut := c.su(args...)
		what := strings.Join(args, " ")
		if code != cli.ExitError {
			t.Errorf("%s: exit %d, want %d", what, code, cli.ExitError)
		}
		contains(t, what+" stderr", errOut, "etcd.yaml.bak", "is a pod named kube-system/etcd", "mv "+stray+" ", "nothing is written")
		if strings.Contains(out+errOut, "at once") {
			t.Errorf("%s speaks of writing at once:\n%s%s", what, out, errOut)
		}
		if after := manifests(t, n.ManifestDir); len(after) != len(before) || after["kube-scheduler.yaml"] != before["kube-scheduler.yaml"] {
			t.Fatalf("%s changed the manifest directory", what)
		}
	}

	// Moved out, the stray takes etcd's pod with it (it held the pod's
	// key) until kubelet parses etcd.yaml again: a touch makes it, and a
	// new etcd starts and answers.
	etcd, err := manifest.Target(n.State, nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	mark = markBeforeWrite(t, n)
	if err := os.Rename(stray, filepath.Join(n.Root, "etcd.yaml.bak")); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := os.Chtimes(filepath.Join(n.ManifestDir, "etcd.yaml"), now, now); err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.WaitReplaced(t.Context(), etcd, mark, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Scanner.WaitActive(t.Context(), etcd, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	out := c.want(cli.ExitOK, "render")
	contains(t, "render", out, "render: the manifests of running components change (kube-scheduler): one transaction", "\ncommitted ")
}
