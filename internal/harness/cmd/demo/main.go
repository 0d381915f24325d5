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
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/runbin"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
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

// setUp builds what the demo needs and brings up the node.
func (d *demo) setUp(ctx context.Context) error {
	repo, err := etcdbuild.RepoRoot()
	if err != nil {
		return err
	}
	d.repo = repo
	if d.tmp, err = os.MkdirTemp("", "stratum-demo-"); err != nil {
		return fmt.Errorf("demo temp dir: %w", err)
	}
	cache, err := etcdbuild.CacheDir()
	if err != nil {
		return err
	}
	d.say("building stratum-upgrade, the stand-ins, etcd %s and etcd %s (etcd and the stand-ins are cached in %s)",
		strings.TrimPrefix(etcdbuild.Builds[0].ModuleVersion, "v"), strings.TrimPrefix(etcdbuild.Builds[1].ModuleVersion, "v"), cache)
	if err := d.build(ctx); err != nil {
		return err
	}
	began := time.Now()
	d.node, err = testbed.StartNode(ctx, testbed.Options{
		StateFile: stateFile,
		Root:      filepath.Join(d.tmp, "node"),
		// A visible but short wait for kubelet at every container start.
		StartDelay: time.Second,
	})
	if err != nil {
		return err
	}
	for ref, mode := range brokenImages {
		comp := componentOf(ref)
		img := kubeletsim.Image{Binary: d.node.StandinBinary(comp), Env: map[string]string{
			standin.EnvMode: string(mode), standin.EnvEvents: d.node.EventsFile,
		}}
		if err := d.node.MapImage(ref, img); err != nil {
			return fmt.Errorf("map image %s: %w", ref, err)
		}
	}
	for _, f := range []string{goodFile, brokenFile} {
		b, err := os.ReadFile(filepath.Join(repo, "testdata/demo", f))
		if err != nil {
			return fmt.Errorf("demo release: %w", err)
		}
		if err := os.WriteFile(filepath.Join(d.tmp, f), b, 0o644); err != nil {
			return fmt.Errorf("demo release: %w", err)
		}
	}
	rel := func(p string) string {
		r, err := filepath.Rel(d.tmp, p)
		if err != nil {
			return p
		}
		return r
	}
	pid := strconv.Itoa(d.node.KubeletPID)
	d.globals = []string{"--manifest-dir=" + rel(d.node.ManifestDir), "--state-dir=stratum", "--proc-scope=" + pid}
	st := d.node.State
	d.say("node %s up in %s: the kubelet stand-in (pid %s) runs the static pods of %s: real etcd %s,",
		st.NodeName, time.Since(began).Round(100*time.Millisecond), pid, rel(d.node.ManifestDir), etcdbuild.Builds[0].Minor)
	d.say("  stand-ins answering the health checks of %s", strings.Join(manifest.NamesFor(st)[1:], ", "))
	d.say("the commands run in %s, each with the flags (--proc-scope: see only this node's processes)", d.tmp)
	d.say("  %s", strings.Join(d.globals, " "))
	return nil
}

// componentOf is the component whose repository ref is an image of.
func componentOf(ref string) string {
	for comp, repo := range testbed.Repos {
		if strings.HasPrefix(ref, repo+":") {
			return comp
		}
	}
	return ""
}

// build builds stratum-upgrade into the temp root while it builds etcd 3.5
// and then 3.6 into the cache. The etcd builds run one after the other:
// two go builds at once on a cold cache each compile the packages they
// share, which on 2 cores cost more than the overlap gains (measured: 104
// CPU-s and 60 s one after the other, 139 CPU-s and 78 s at once); the
// stratum-upgrade build keeps the second core busy.
func (d *demo) build(ctx context.Context) error {
	began := time.Now()
	d.bin = filepath.Join(d.tmp, "bin", "stratum-upgrade")
	var wg sync.WaitGroup
	type part struct {
		name string
		took time.Duration
		err  error
	}
	parts := make([]part, 1+len(etcdbuild.Builds))
	wg.Go(func() {
		t := time.Now()
		args := []string{"build", "-o", d.bin}
		if d.version != "" {
			args = append(args, "-ldflags", "-X github.com/ciq/stratum-upgrade/internal/cli.Version="+d.version)
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/stratum-upgrade")...)
		cmd.Dir = d.repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build ./cmd/stratum-upgrade: %w\n%s", err, out)
		}
		parts[0] = part{"stratum-upgrade", time.Since(t), err}
	})
	wg.Go(func() {
		for i, b := range etcdbuild.Builds {
			t := time.Now()
			_, err := etcdbuild.Binary(b.Minor)
			parts[i+1] = part{"etcd " + strings.TrimPrefix(b.ModuleVersion, "v"), time.Since(t), err}
			if err != nil || ctx.Err() != nil {
				break
			}
		}
	})
	wg.Wait()
	var errs []error
	var took []string
	for _, p := range parts {
		errs = append(errs, p.err)
		took = append(took, fmt.Sprintf("%s %s", p.name, p.took.Round(100*time.Millisecond)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.say("built in %s (%s)", time.Since(began).Round(100*time.Millisecond), strings.Join(took, ", "))
	return nil
}

// steps is the transcript.
func (d *demo) steps(ctx context.Context) error {
	steps := []func(context.Context) error{
		func(ctx context.Context) error { return d.su(ctx, exitOK, "version") },
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("import the node's state: the manifests kubelet runs are already its render, so none is written")
			return d.su(ctx, exitOK, "init", "--state", "node/state.yaml")
		},
		func(ctx context.Context) error { return d.su(ctx, exitOK, "status") },
		func(ctx context.Context) error {
			v, err := d.etcdVersion(ctx)
			if err != nil {
				return err
			}
			if err := d.etcdPut(ctx, "demo/written-by", "etcd "+v); err != nil {
				return err
			}
			fmt.Fprintln(d.w)
			d.say("etcd serves %s; the demo wrote the key demo/written-by = %q into it", v, "etcd "+v)
			return nil
		},
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("what would an upgrade to v1.34.5 change? (plan writes nothing)")
			return d.plan(ctx, goodFile)
		},
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("the upgrade: back up etcd's data, replace each component in roster order, wait for kubelet")
			d.say("to restart it and for the new process to answer, verify all of them for %s, commit", soak)
			return d.su(ctx, exitOK, "run", "--to", goodFile, "--soak", soak)
		},
		d.checkEtcdUpgraded,
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("v1.34.6 is broken: its kube-scheduler runs but never opens its health port")
			return d.plan(ctx, brokenFile)
		},
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("the upgrade gives up on kube-scheduler after --active-timeout and rolls every component it")
			d.say("changed back to the snapshot it took first: exit 3, the node runs v1.34.5 again")
			return d.su(ctx, exitRolledBack, "run", "--to", brokenFile, "--active-timeout", activeTimeout, "--soak", soak)
		},
		d.checkRolledBack,
		func(ctx context.Context) error { return d.su(ctx, exitOK, "status") },
		func(ctx context.Context) error { return d.su(ctx, exitOK, "history") },
	}
	for _, step := range steps {
		err := step(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if !d.keepGoing {
				return err
			}
			d.fail(err)
		}
	}
	return nil
}

// planFilter keeps plan's header, each diff's new-file line and its changed
// lines: the context lines would make the transcript three times longer.
const planFilter = `^(upgrade|etcd|\+\+\+|[-+] )`

// plan runs plan --to release, showing the lines planFilter keeps.
func (d *demo) plan(ctx context.Context, release string) error {
	return d.run(ctx, exitOK, regexp.MustCompile(planFilter), "plan", "--to", release)
}

// su runs stratum-upgrade with args (and the hidden global flags) in the
// temp root, streaming its output, and fails unless it exits want.
// Cancelling ctx sends the command SIGINT, as Ctrl-C would.
func (d *demo) su(ctx context.Context, want int, args ...string) error {
	return d.run(ctx, want, nil, args...)
}

// run is su with grep: only the stdout lines matching filter are shown
// (all when nil), and the transcript says so.
func (d *demo) run(ctx context.Context, want int, filter *regexp.Regexp, args ...string) error {
	line := strings.Join(args, " ")
	shown := line
	if filter != nil {
		shown += " | grep -E '" + filter.String() + "'"
	}
	fmt.Fprintf(d.w, "$ stratum-upgrade %s\n", shown)
	cmd := exec.CommandContext(ctx, d.bin, append(slices.Clone(d.globals), args...)...)
	cmd.Dir = d.tmp
	cmd.Stdout, cmd.Stderr = d.w, d.w
	var grep *grepWriter
	if filter != nil {
		grep = &grepWriter{w: d.w, re: filter}
		cmd.Stdout = grep
	}
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "STRATUM_FAULT=") })
	// Its own process group: Ctrl-C reaches it once, from the demo.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	if grep != nil {
		grep.flush()
	}
	code, err := runbin.ExitCode(err)
	if err != nil {
		return fmt.Errorf("stratum-upgrade %s: %w", line, err)
	}
	if code != want {
		return fmt.Errorf("stratum-upgrade %s: exit %d, want %d", line, code, want)
	}
	if code != exitOK {
		fmt.Fprintf(d.w, "[exit %d, as expected]\n", code)
	}
	return nil
}

// checkEtcdUpgraded asks etcd which version it serves and reads back the
// key written under 3.5.
func (d *demo) checkEtcdUpgraded(ctx context.Context) error {
	v, err := d.etcdVersion(ctx)
	if err != nil {
		return err
	}
	want := etcdbuild.Builds[1].Minor + "."
	if !strings.HasPrefix(v, want) {
		return fmt.Errorf("etcd serves %s after the upgrade, want %s*", v, want)
	}
	got, err := d.etcdGet(ctx, "demo/written-by")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(got, "etcd "+etcdbuild.Builds[0].Minor+".") {
		return fmt.Errorf("etcd %s: the key written before the upgrade reads %q", v, got)
	}
	fmt.Fprintln(d.w)
	d.say("etcd now serves %s, on the same data: demo/written-by still reads %q", v, got)
	return nil
}

// checkRolledBack checks the scheduler's manifest names v1.34.5 again and
// every component answers.
func (d *demo) checkRolledBack(ctx context.Context) error {
	p := filepath.Join(d.node.ManifestDir, manifest.FileName(nodestate.Scheduler))
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("after the rollback: %w", err)
	}
	want := "image: " + testbed.ModeImage(nodestate.Scheduler, "v1.34.5", "") + "\n"
	if !strings.Contains(string(b), want) {
		return fmt.Errorf("after the rollback %s does not hold %q", p, strings.TrimSpace(want))
	}
	if err := d.node.WaitActive(ctx, checkTimeout); err != nil {
		return fmt.Errorf("after the rollback: %w", err)
	}
	v, err := d.etcdVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(d.w)
	d.say("kube-scheduler's manifest names %s again, every component answers, etcd serves %s", strings.TrimPrefix(strings.TrimSpace(want), "image: "), v)
	return nil
}

// etcd POSTs body (or GETs, when nil) to path on the node's etcd through
// its JSON gateway, with the apiserver's client certificate, and decodes
// the answer into out; it retries until checkTimeout. (Not etcd's client:
// see exitOK.)
func (d *demo) etcd(ctx context.Context, path string, body, out any) error {
	tlsCfg, err := d.node.EtcdTLS()
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	url := d.node.EtcdEndpoint() + path
	deadline := time.Now().Add(checkTimeout)
	for {
		err := func() error {
			method, rd := http.MethodGet, io.Reader(nil)
			if body != nil {
				b, err := json.Marshal(body)
				if err != nil {
					return err
				}
				method, rd = http.MethodPost, bytes.NewReader(b)
			}
			req, err := http.NewRequestWithContext(ctx, method, url, rd)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
			}
			return json.Unmarshal(b, out)
		}()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd %s: %w (tried for %s)", url, err, checkTimeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// etcdVersion is the server version etcd reports on /version.
func (d *demo) etcdVersion(ctx context.Context) (string, error) {
	var v struct {
		Server string `json:"etcdserver"`
	}
	if err := d.etcd(ctx, "/version", nil, &v); err != nil {
		return "", err
	}
	if v.Server == "" {
		return "", fmt.Errorf("etcd %s/version: no etcdserver version", d.node.EtcdEndpoint())
	}
	return v.Server, nil
}

// etcdPut writes k = v through the v3 gateway (keys and values base64).
func (d *demo) etcdPut(ctx context.Context, k, v string) error {
	var resp struct{}
	return d.etcd(ctx, "/v3/kv/put", map[string]string{"key": b64(k), "value": b64(v)}, &resp)
}

// etcdGet reads k through the v3 gateway: "" when it is not there.
func (d *demo) etcdGet(ctx context.Context, k string) (string, error) {
	var resp struct {
		KVs []struct {
			Value []byte `json:"value"` // base64 in JSON
		} `json:"kvs"`
	}
	if err := d.etcd(ctx, "/v3/kv/range", map[string]string{"key": b64(k)}, &resp); err != nil {
		return "", err
	}
	if len(resp.KVs) == 0 {
		return "", nil
	}
	return string(resp.KVs[0].Value), nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

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

// grepWriter writes the complete lines written to it that match re.
type grepWriter struct {
	w       io.Writer
	re      *regexp.Regexp
	partial []byte
}

func (g *grepWriter) Write(p []byte) (int, error) {
	g.partial = append(g.partial, p...)
	for {
		i := bytes.IndexByte(g.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := g.partial[:i+1]
		if g.re.Match(line[:i]) {
			if _, err := g.w.Write(line); err != nil {
				return len(p), err
			}
		}
		g.partial = g.partial[i+1:]
	}
}

// flush writes a last line without a newline, if it matches.
func (g *grepWriter) flush() {
	if len(g.partial) > 0 && g.re.Match(g.partial) {
		fmt.Fprintf(g.w, "%s\n", g.partial)
	}
	g.partial = nil
}
