// Command demo is stratum-upgrade's built-in demo, what `make demo` runs.
//
// It builds stratum-upgrade, the test bed's stand-ins and real etcd 3.5 and
// 3.6 (cached under $STRATUM_CACHE), brings up a control-plane node in a new
// temporary directory (internal/harness/testbed: the kubelet stand-in watching a
// manifest directory, real etcd, component stand-ins, kube-vip with a VIP),
// and drives the real stratum-upgrade binary through it as a shell
// transcript: version, init, status, plan and run to v1.34.5 (a real etcd
// 3.5 -> 3.6 upgrade), then plan and run to v1.34.6, whose kube-scheduler
// never becomes healthy, so the upgrade rolls back; then status and
// history. Finally it tears the node down, removes the temporary directory
// and checks that no process of the node and no file is left.
//
// It exits 0 when every step ended as expected, 1 when one did not or
// teardown left something behind, and 130 when interrupted (SIGINT or
// SIGTERM tear the node down first) and teardown left nothing. Flags:
//
//	-keep-going  run every step even after one ended unexpectedly
//	-version V   stamp V into stratum-upgrade (make demo passes git describe)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// Files under testdata/demo: the node's state and the two releases.
const (
	stateFile  = "testdata/demo/node.yaml"
	goodFile   = "v1.34.5.yaml"
	brokenFile = "v1.34.6.yaml"
)

// brokenImages are the images of v1.34.6 and the stand-in mode each runs
// in: the test bed maps only v1.34.4 and v1.34.5, so the demo maps these.
var brokenImages = map[string]standin.Mode{
	"registry.k8s.io/kube-apiserver:v1.34.6":          standin.ModeHealthy,
	"registry.k8s.io/kube-controller-manager:v1.34.6": standin.ModeHealthy,
	"registry.k8s.io/kube-scheduler:v1.34.6":          standin.ModeNeverListen,
}

// stratum-upgrade's exit codes the demo expects (docs/cli.md). The demo
// does not import internal/cli, nor etcd's client: `go run` compiles the
// demo before it can start the etcd builds, so its own dependencies are
// kept to the test bed's; stratum-upgrade builds alongside etcd.
const (
	exitOK         = 0
	exitRolledBack = 3
)

// Deadlines of the transactions, short so the demo is quick: the stand-in
// components answer within a second or two of their start.
const (
	soak          = "3s"
	activeTimeout = "10s"
	// checkTimeout bounds each of the demo's own checks against the node.
	checkTimeout = 30 * time.Second
)

func main() {
	keepGoing := flag.Bool("keep-going", false, "run every step even after one ended unexpectedly")
	version := flag.String("version", "", "stamp this version into stratum-upgrade (default: its own, dev)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{w: os.Stdout, start: time.Now(), keepGoing: *keepGoing, version: *version}
	os.Exit(d.main(ctx))
}

type demo struct {
	w         io.Writer
	start     time.Time
	keepGoing bool
	version   string

	repo    string
	tmp     string // the temporary root: everything the demo creates
	bin     string // the stratum-upgrade binary
	node    *testbed.Node
	globals []string // the flags every command gets, not shown

	failures []string
}

// say prints a narration line, a comment in the transcript.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.w, "# "+format+"\n", args...)
}

// fail records a step that did not end as expected.
func (d *demo) fail(err error) {
	d.failures = append(d.failures, err.Error())
	fmt.Fprintf(d.w, "# FAILED: %v\n", err)
}

func (d *demo) main(ctx context.Context) int {
	err := d.setUp(ctx)
	if err == nil {
		err = d.steps(ctx)
	}
	if err != nil && ctx.Err() == nil {
		d.fail(err)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(d.w)
		d.say("interrupted: tearing the node down")
	}
	if len(d.failures) > 0 && d.node != nil {
		d.showKubeletLog(40)
	}
	d.tearDown()
	elapsed := time.Since(d.start).Round(100 * time.Millisecond)
	switch {
	case ctx.Err() != nil && len(d.failures) == 0:
		d.say("interrupted after %s", elapsed)
		return 130
	case len(d.failures) > 0:
		d.say("demo FAILED after %s: %d step(s) did not end as expected:", elapsed, len(d.failures))
		for _, f := range d.failures {
			d.say("  - %s", f)
		}
		return 1
	}
	d.say("demo done in %s: v1.34.5 committed (etcd 3.5 -> 3.6), v1.34.6 rolled back, nothing left behind", elapsed)
	return 0
}

// showKubeletLog prints the last lines of the kubelet stand-in's log, which
// teardown removes: what a failed run in CI has to go on.
func (d *demo) showKubeletLog(lines int) {
	b, err := os.ReadFile(d.node.KubeletLog)
	if err != nil {
		d.say("kubelet stand-in log: %v", err)
		return
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	fmt.Fprintln(d.w)
	d.say("the last %d lines of the kubelet stand-in's log %s:", len(all), d.node.KubeletLog)
	for _, l := range all {
		fmt.Fprintf(d.w, "#   %s\n", l)
	}
}

// tearDown stops the node, removes the temp root and checks that neither a
// process of the node nor the root is left; what is left is a failure.
func (d *demo) tearDown() {
	if d.tmp == "" {
		return
	}
	fmt.Fprintln(d.w)
	began := time.Now()
	if d.node != nil {
		if err := d.node.Stop(); err != nil {
			d.fail(fmt.Errorf("teardown: %w", err))
		}
		left, err := d.node.Leftovers()
		switch {
		case err != nil:
			d.fail(fmt.Errorf("teardown: %w", err))
		case len(left) > 0:
			d.fail(fmt.Errorf("teardown: processes %v of the node are still running", left))
		}
	}
	if err := os.RemoveAll(d.tmp); err != nil {
		d.fail(fmt.Errorf("teardown: %w", err))
	}
	if _, err := os.Lstat(d.tmp); !errors.Is(err, os.ErrNotExist) {
		d.fail(fmt.Errorf("teardown: %s is still there (%v)", d.tmp, err))
		return
	}
	d.say("teardown in %s: every pod stopped, no process of the node left, %s removed",
		time.Since(began).Round(100*time.Millisecond), d.tmp)
}
