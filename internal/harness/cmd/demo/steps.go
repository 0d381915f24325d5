// The transcript: its steps and running stratum-upgrade in it.

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/runbin"
)

// steps is the transcript.
func (d *demo) steps(ctx context.Context) error {
	sc := d.sc
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
	}
	if sc.real {
		steps = append(steps, d.writeConfigMap)
	}
	steps = append(steps,
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("what would an upgrade to %s change? (plan writes nothing)", sc.good)
			return d.plan(ctx, sc.goodFile)
		},
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("the upgrade: back up etcd's data, replace each component in roster order, wait for kubelet")
			d.say("to restart it and for the new process to answer, verify all of them for %s, commit", soak)
			return d.su(ctx, exitOK, append([]string{"run", "--to", sc.goodFile}, sc.goodFlags...)...)
		},
		d.checkEtcdUpgraded,
	)
	if sc.real {
		steps = append(steps, d.readConfigMap("the upgrade"))
	}
	steps = append(steps,
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			for _, l := range sc.brokenSay {
				d.say("%s", l)
			}
			return d.plan(ctx, sc.brokenFile, sc.brokenFlags...)
		},
		func(ctx context.Context) error {
			fmt.Fprintln(d.w)
			d.say("the first upgrade gave kube-apiserver, -controller-manager and -scheduler --permit-port-sharing,")
			d.say("so each new instance now starts beside the old one (a surge, no gap); the new kube-scheduler")
			d.say("never answers: after --active-timeout its surge copy is removed, the old one never stopped,")
			d.say("and every component changed goes back to the snapshot: exit 3, the node runs %s again", sc.good)
			return d.su(ctx, exitRolledBack, append([]string{"run", "--to", sc.brokenFile}, sc.brokenFlags...)...)
		},
		d.checkRolledBack,
	)
	if sc.real {
		steps = append(steps, d.readConfigMap("the rollback"))
	}
	steps = append(steps,
		func(ctx context.Context) error { return d.su(ctx, exitOK, "status") },
		func(ctx context.Context) error { return d.su(ctx, exitOK, "history") },
	)
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

// plan runs plan --to release, showing the lines planFilter keeps; of
// run's flags, it takes --ignore-preflight-errors.
func (d *demo) plan(ctx context.Context, release string, runFlags ...string) error {
	args := []string{"plan", "--to", release}
	if i := slices.Index(runFlags, "--ignore-preflight-errors"); i >= 0 && i+1 < len(runFlags) {
		args = append(args, runFlags[i:i+2]...)
	}
	return d.run(ctx, exitOK, regexp.MustCompile(planFilter), args...)
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
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "STRATUM_FAULT=") }), d.env...)
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
