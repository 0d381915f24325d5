// Setting the demo up: building stratum-upgrade and etcd, and bringing up
// the node.

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// setUp builds what the demo needs and brings up the node.
func (d *demo) setUp(ctx context.Context) error {
	repo, err := build.RepoRoot()
	if err != nil {
		return err
	}
	d.repo = repo
	if d.tmp, err = os.MkdirTemp("", "stratum-demo-"); err != nil {
		return fmt.Errorf("demo temp dir: %w", err)
	}
	cache, err := build.CacheDir()
	if err != nil {
		return err
	}
	d.say("%s", buildHeader(cache))
	if err := d.build(ctx); err != nil {
		return err
	}
	began := time.Now()
	d.node, err = testbed.StartNode(ctx, testbed.Options{
		StateFile: d.sc.stateFile,
		Real:      d.sc.real,
		Root:      filepath.Join(d.tmp, "node"),
		// A visible but short wait for kubelet at every container start.
		StartDelay: time.Second,
	})
	if err != nil {
		return err
	}
	for ref, mode := range d.sc.brokenImages {
		comp := componentOf(ref)
		img := kubeletsim.Image{Binary: d.node.StandinBinary(comp), Env: map[string]string{
			standin.EnvMode: string(mode), standin.EnvEvents: d.node.EventsFile,
		}}
		if err := d.node.MapImage(ref, img); err != nil {
			return fmt.Errorf("map image %s: %w", ref, err)
		}
	}
	for _, f := range []string{d.sc.goodFile, d.sc.brokenFile} {
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
		st.NodeName, time.Since(began).Round(100*time.Millisecond), pid, rel(d.node.ManifestDir), d.sc.etcdFrom.Minor)
	d.say("  %s", d.sc.components(st))
	d.say("the commands run in %s, each with the flags (--proc-scope: see only this node's processes)", d.tmp)
	d.say("  %s", strings.Join(d.globals, " "))
	if !d.sc.real {
		// The stand-in kube-apiserver serves health endpoints only, with a
		// certificate of its own: on this node there is no API server to
		// post Events to or keep kubeadm-config in, and the commands are
		// told so, as an operator tells a node without one.
		d.env = []string{"STRATUM_NO_EVENTS=true", "STRATUM_NO_KUBEADM_CONFIG=true"}
		d.say("and, as the stand-in kube-apiserver is no API server, the environment (no Events, no kubeadm-config update)")
		d.say("  %s", strings.Join(d.env, " "))
	}
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

// buildHeader is the line that says what build builds: stratum-upgrade,
// the stand-ins and every etcd of etcdbuild.Builds (it builds them all,
// whichever two the scenario runs), cached in cache.
func buildHeader(cache string) string {
	vs := make([]string, len(etcdbuild.Builds))
	for i, b := range etcdbuild.Builds {
		vs[i] = strings.TrimPrefix(b.ModuleVersion, "v")
	}
	etcds := vs[len(vs)-1]
	if len(vs) > 1 {
		etcds = strings.Join(vs[:len(vs)-1], ", ") + " and " + etcds
	}
	return fmt.Sprintf("building stratum-upgrade, the stand-ins and etcd %s (etcd and the stand-ins are cached in %s)", etcds, cache)
}

// build builds stratum-upgrade into the temp root while it builds every
// etcd of etcdbuild.Builds (3.5, 3.6, 3.7) into the cache. The etcd builds run one after the other:
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
