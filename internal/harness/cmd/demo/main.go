// Command demo is stratum-upgrade's built-in demo, what `make demo` runs.
//
// It builds stratum-upgrade, the test bed's stand-ins and real etcd 3.5,
// 3.6 and 3.7 (cached under $STRATUM_CACHE), brings up a control-plane node in a new
// temporary directory (internal/harness/testbed: the kubelet stand-in watching a
// manifest directory, real etcd, component stand-ins, kube-vip with a VIP),
// and drives the real stratum-upgrade binary through it as a shell
// transcript: version, init, status, plan and run to v1.34.5 (a real etcd
// 3.5 -> 3.6 upgrade), then plan and run to v1.34.6, whose kube-scheduler
// never becomes healthy, so the upgrade rolls back; then status and
// history. Finally it tears the node down, removes the temporary directory
// and checks that no process of the node and no file is left.
//
// With -real (make demo REAL=1) the node runs the real control plane that
// make real-binaries builds: kube-apiserver, kube-controller-manager and
// kube-scheduler v1.36.3 on etcd 3.6, upgraded to v1.37.2 with etcd 3.7,
// then a rebuild of v1.37.2 whose kube-scheduler exits at start, rolled
// back; a ConfigMap written through the apiserver before is read back
// after each. Without those binaries it says so and exits 1: it does not
// build them (about 20 minutes).
//
// It exits 0 when every step ended as expected, 1 when one did not or
// teardown left something behind, and 130 when interrupted (SIGINT or
// SIGTERM tear the node down first) and teardown left nothing. Flags:
//
//	-keep-going  run every step even after one ended unexpectedly
//	-real        run the real control plane (see above)
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

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// scenario is what the demo runs: a node's state, a release that commits
// and one that rolls back, and what differs in running and narrating them.
type scenario struct {
	// real runs the real control plane (testbed.Options.Real).
	real bool
	// stateFile is the node's state, relative to the repository root;
	// goodFile and brokenFile are the releases, under testdata/demo.
	stateFile, goodFile, brokenFile string
	// from is the node's Kubernetes version, good the release that
	// commits, broken the one that rolls back.
	from, good, broken string
	// etcdFrom and etcdTo are the etcd builds before and after good.
	etcdFrom, etcdTo etcdbuild.Build
	// brokenImages are the images of broken and the stand-in mode each
	// runs in: the test bed does not map them, so the demo does.
	brokenImages map[string]standin.Mode
	// brokenSay says what is wrong with broken.
	brokenSay []string
	// goodFlags and brokenFlags are run's flags beyond --to.
	goodFlags, brokenFlags []string
	// components says what runs the components other than etcd.
	components func(st *nodestate.NodeState) string
}

// standins is the default demo: stand-ins for every component but etcd,
// with v1.34.6's kube-scheduler never opening its health port.
var standins = scenario{
	stateFile: "testdata/demo/node.yaml", goodFile: "v1.34.5.yaml", brokenFile: "v1.34.6.yaml",
	from: "v1.34.4", good: "v1.34.5", broken: "v1.34.6",
	etcdFrom: etcdbuild.Builds[0], etcdTo: etcdbuild.Builds[1],
	// The test bed maps only v1.34.4 and v1.34.5.
	brokenImages: map[string]standin.Mode{
		"registry.k8s.io/kube-apiserver:v1.34.6":          standin.ModeHealthy,
		"registry.k8s.io/kube-controller-manager:v1.34.6": standin.ModeHealthy,
		"registry.k8s.io/kube-scheduler:v1.34.6":          standin.ModeNeverListen,
	},
	brokenSay:   []string{"v1.34.6 is broken: its kube-scheduler runs but never opens its health port"},
	goodFlags:   []string{"--soak", soak, "--release-wait", releaseWait},
	brokenFlags: []string{"--active-timeout", activeTimeout, "--soak", soak, "--release-wait", releaseWait},
	components: func(st *nodestate.NodeState) string {
		return "stand-ins answering the health checks of " + strings.Join(manifest.NamesFor(st)[1:], ", ")
	},
}

// realBrokenScheduler is the kube-scheduler image of the real demo's
// broken release: a stand-in that exits as soon as it starts.
var realBrokenScheduler = testbed.ModeImage(nodestate.Scheduler, "v1.37.2", standin.ModeExitAtStart)

// realPlane is the demo on the real control plane (-real): kube-apiserver,
// kube-controller-manager and kube-scheduler v1.36.3 -> v1.37.2, the
// binaries make real-binaries builds, with etcd 3.6 -> 3.7; then a rebuild
// of v1.37.2 whose kube-scheduler exits at start. Its image tag,
// v1.37.2-exit-at-start, is a pre-release of v1.37.2 and so sorts below
// it: the run lets the KubernetesDowngrade check through.
var realPlane = scenario{
	real:      true,
	stateFile: "testdata/demo/node-real.yaml", goodFile: "v1.37.2.yaml", brokenFile: "v1.37.2-broken.yaml",
	from: "v1.36.3", good: "v1.37.2", broken: "v1.37.2-broken",
	etcdFrom: etcdbuild.Builds[1], etcdTo: etcdbuild.Builds[2],
	brokenImages: map[string]standin.Mode{realBrokenScheduler: standin.ModeExitAtStart},
	brokenSay: []string{
		"v1.37.2-broken.yaml is broken: its kube-scheduler, " + strings.TrimPrefix(realBrokenScheduler, testbed.Repos[nodestate.Scheduler]+":") + ", exits as soon as it starts",
		"(a pre-release tag of v1.37.2, so it sorts below it: --ignore-preflight-errors=KubernetesDowngrade)",
	},
	// The real kube-apiserver takes several seconds to start and etcd 3.7
	// to take over 3.6's data; the soak stays short.
	goodFlags: []string{"--replace-timeout", "1m", "--active-timeout", "90s", "--stop-timeout", "30s",
		"--etcd-backup-timeout", "30s", "--soak", soak, "--release-wait", releaseWait},
	brokenFlags: []string{"--ignore-preflight-errors", "KubernetesDowngrade", "--replace-timeout", "1m",
		"--active-timeout", "20s", "--stop-timeout", "30s", "--soak", soak, "--release-wait", releaseWait},
	components: func(st *nodestate.NodeState) string {
		return "the real " + strings.Join(manifest.NamesFor(st)[1:], ", ") + " " + st.KubernetesVersion + " (make real-binaries)"
	},
}

// notBuilt is the one line -real says when the real control plane of a
// version of sc is not built (built reports whether it is), or "".
func (sc scenario) notBuilt(built func(version string) bool) string {
	var missing []string
	for _, v := range []string{sc.from, sc.good} {
		if !built(v) {
			missing = append(missing, v)
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("demo -real: the real control plane is not built for Kubernetes %s: run `make real-binaries` first (about 20 minutes)",
		strings.Join(missing, " and "))
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
	soak = "3s"
	// releaseWait: the kubelet stand-in releases a stopped pod's name
	// 100 ms after it is gone, where the real kubelet takes up to 2 s.
	releaseWait   = "300ms"
	activeTimeout = "10s"
	// checkTimeout bounds each of the demo's own checks against the node.
	checkTimeout = 30 * time.Second
)

func main() {
	keepGoing := flag.Bool("keep-going", false, "run every step even after one ended unexpectedly")
	version := flag.String("version", "", "stamp this version into stratum-upgrade (default: its own, dev)")
	realFlag := flag.Bool("real", false, "run the real control plane (v1.36.3 -> v1.37.2), built by make real-binaries")
	flag.Parse()
	sc := standins
	if *realFlag {
		sc = realPlane
		if msg := sc.notBuilt(kubebuild.Built); msg != "" {
			fmt.Fprintln(os.Stderr, msg)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{w: os.Stdout, start: time.Now(), keepGoing: *keepGoing, version: *version, sc: sc}
	os.Exit(d.main(ctx))
}

type demo struct {
	w         io.Writer
	start     time.Time
	keepGoing bool
	version   string
	sc        scenario

	repo    string
	tmp     string // the temporary root: everything the demo creates
	bin     string // the stratum-upgrade binary
	node    *testbed.Node
	globals []string // the flags every command gets, not shown
	// env is the environment every command gets beyond the demo's own.
	env []string

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
	d.say("demo done in %s: %s committed (etcd %s -> %s), %s rolled back, nothing left behind",
		elapsed, d.sc.good, d.sc.etcdFrom.Minor, d.sc.etcdTo.Minor, d.sc.broken)
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
