package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
)

// exitFileEnv, when set in a stratum-upgrade command's environment, names a
// file the test binary writes the command's exit code to: testscript can
// only tell a background command's success from its failure.
const exitFileEnv = "STRATUM_TEST_EXIT_FILE"

// TestMain makes this test binary double as stratum-upgrade (the real
// command: run, the body of main) and as the helpers the scripts use.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"stratum-upgrade": func() {
			code := run()
			if f := os.Getenv(exitFileEnv); f != "" {
				if err := os.WriteFile(f, []byte(strconv.Itoa(code)+"\n"), 0o644); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
			os.Exit(code)
		},
		"hold-journal": holdJournal,
	})
}

// holdJournal JOURNAL READYFILE opens the journal read-write, so it holds
// bbolt's exclusive flock, writes READYFILE, and holds the lock until
// SIGINT or SIGTERM (testscript sends SIGINT at the end of the script), or
// for two minutes at most, so that it can never outlive a failed test for
// long.
func holdJournal() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: hold-journal JOURNAL READYFILE")
		os.Exit(2)
	}
	j, err := journal.Open(os.Args[1], journal.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer j.Close()
	if err := os.WriteFile(os.Args[2], []byte("ready\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Minute):
	}
}

func TestScripts(t *testing.T) {
	// The scripts' nodes have kube-controller-manager and kube-scheduler
	// on kubeadm's ports, 10257 and 10259, and expect nothing to answer
	// there (status: ACTIVE no). The test bed tests that bind them hold
	// them (TestAdoptKubeadmOnTestBed, also from another go test
	// process); so do the scripts, while they run.
	testbed.HoldPorts(t, 5*time.Minute, 10257, 10259)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		// STRATUM_UPDATE_GOLDEN=1 rewrites each `cmp` golden file in its
		// script to what the command printed (review the diff!);
		// cmpnorm goldens are dumped by STRATUM_GOLDEN_DUMP instead.
		UpdateScripts: os.Getenv("STRATUM_UPDATE_GOLDEN") == "1",
		Setup: func(env *testscript.Env) error {
			env.Setenv("REPO", repo)
			// No config file: the host's /etc/stratum/upgrade.yaml must
			// not change what the scripts see.
			env.Setenv("STRATUM_CONFIG", "")
			// The kubelet stand-in releases a stopped pod's name 100 ms
			// after it is gone (testbed.Options.Housekeeping); the real
			// kubelet's 2.5 s would only slow every step down.
			env.Setenv("STRATUM_RELEASE_WAIT", "300ms")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"su":          cmdSU,
			"su-faults":   cmdSUFaults,
			"envsubst":    cmdEnvsubst,
			"waitfor":     cmdWaitfor,
			"fingerprint": cmdFingerprint,
			"lasttxn":     cmdLastTxn,
			"cmpnorm":     cmdCmpNorm,
		},
	})
}

// su CODE ARGS... runs stratum-upgrade ARGS on this script's manifest
// directory ($WORK/manifests) and state directory ($WORK/state), with the
// process scan scoped to the command itself (no foreign kube-* process on
// the machine is ever seen), and fails unless it exits with CODE ("killed":
// by a signal). Later flags in ARGS override these.
func cmdSU(ts *testscript.TestScript, neg bool, args []string) {
	suWith(ts, neg, "stratum-upgrade", args)
}

// su-faults CODE ARGS... is su with a stratum-upgrade built with the fault
// points compiled in (build tag stratumfault), so that STRATUM_FAULT in the
// script's environment arms them; the product binary ignores it.
func cmdSUFaults(ts *testscript.TestScript, neg bool, args []string) {
	bin, err := build.StratumUpgrade(true)
	if err != nil {
		ts.Fatalf("%v", err)
	}
	suWith(ts, neg, bin, args)
}

func suWith(ts *testscript.TestScript, neg bool, bin string, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: su CODE args...")
	}
	argv := append([]string{
		"--manifest-dir=" + ts.MkAbs("manifests"),
		"--state-dir=" + ts.MkAbs("state"),
		"--proc-scope=self",
	}, args[1:]...)
	err := ts.Exec(bin, argv...)
	if len(args) > 1 && args[1] == "init" {
		seedSingleMember(ts)
	}
	got := "0"
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() < 0:
		got = "killed"
	case errors.As(err, &ee):
		got = strconv.Itoa(ee.ExitCode())
	case err != nil:
		ts.Fatalf("stratum-upgrade: %v", err)
	}
	if got != args[0] {
		ts.Fatalf("stratum-upgrade %s: exit code %s, want %s", strings.Join(args[1:], " "), got, args[0])
	}
}

// seedSingleMember keeps, after init, beside the journal in the script's
// state directory, the member list of a single-member etcd, as a command
// against a healthy etcd would have: the scripts' nodes run no etcd, and
// the engine takes its member count from that record when etcd cannot be
// reached (an unknown count refuses every transaction).
func seedSingleMember(ts *testscript.TestScript) {
	state := ts.MkAbs("state")
	path := filepath.Join(state, cluster.MembersFile)
	if _, err := os.Stat(filepath.Join(state, "stratum.db")); err != nil {
		return
	}
	if _, err := os.Lstat(path); err == nil {
		return
	}
	ts.Check(cluster.SaveMembers(path, cluster.Members{Count: 1, At: time.Now().UTC()}))
}

// envsubst FILE... replaces $VAR and ${VAR} in each file with the script's
// environment (node state files name absolute paths under $WORK).
func cmdEnvsubst(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: envsubst file...")
	}
	for _, f := range args {
		p := ts.MkAbs(f)
		b, err := os.ReadFile(p)
		ts.Check(err)
		ts.Check(os.WriteFile(p, []byte(os.Expand(string(b), ts.Getenv)), 0o644))
	}
}

// waitfor FILE REGEXP waits up to 30 s for FILE to exist and match REGEXP.
func cmdWaitfor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitfor file regexp")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	p := ts.MkAbs(args[0])
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(p)
		if err == nil && re.Match(b) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waiting for %s to match %q: timed out after 30s (last content %q, error %v)", p, args[1], b, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fingerprint OUT PATH... writes to OUT one line per file and directory
// under each PATH: its path and mode; for a file its size, modification
// time in nanoseconds and sha256. Two equal fingerprints mean no file was
// written, created, removed or renamed. Directory mtimes are left out on
// purpose: manifest.Open probes that the directory is writable with a
// hidden file it removes at once (durable.CheckDir), which bumps the
// directory's mtime without leaving anything.
func cmdFingerprint(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: fingerprint out path...")
	}
	var sb strings.Builder
	for _, root := range args[1:] {
		err := filepath.WalkDir(ts.MkAbs(root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&sb, "%s %v", p, fi.Mode())
			if fi.Mode().IsRegular() {
				fmt.Fprintf(&sb, " %d %d", fi.Size(), fi.ModTime().UnixNano())
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				fmt.Fprintf(&sb, " %x", sha256.Sum256(b))
			}
			sb.WriteByte('\n')
			return nil
		})
		ts.Check(err)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(sb.String()), 0o644))
}

// lasttxn VAR sets VAR to the id of the newest transaction in
// $WORK/state's journal (opened read-only).
func cmdLastTxn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: lasttxn var")
	}
	j, err := journal.Open(ts.MkAbs("state/stratum.db"), journal.Options{ReadOnly: true})
	ts.Check(err)
	defer j.Close()
	hist, err := j.History(1)
	ts.Check(err)
	if len(hist) == 0 {
		ts.Fatalf("no transaction in the journal")
	}
	ts.Setenv(args[0], hist[0].ID)
}
