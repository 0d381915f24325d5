package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/harness/runbin"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// The crash matrix: for every step boundary of the upgrade and of the
// rollback, the real stratum-upgrade binary is SIGKILLed there (by its own
// fault point), then `stratum-upgrade resume` runs, and the node must have
// converged: committed (all new) or rolled back (all old, the snapshot's
// bytes but for restarted-at), no staging file, every component process
// started after its manifest's last write, no open transaction.

// crashNode is a test bed node driven by the real binary.
type crashNode struct {
	t        *testing.T
	node     *testbed.Node
	stateDir string
	release  string
	before   map[string][]byte
}

func newCrashNode(t *testing.T, fail string) *crashNode {
	t.Helper()
	return newCrashNodeWith(t, fail, testbed.Options{})
}

// newCrashNodeWith is newCrashNode on a node started with opts.
func newCrashNodeWith(t *testing.T, fail string, opts testbed.Options) *crashNode {
	t.Helper()
	n := testbed.Start(t, opts)
	c := &crashNode{t: t, node: n, stateDir: filepath.Join(n.Root, "state")}
	c.run(0, "", "init", "--state", n.StateFile)
	rel := release(n.State, true, fail, standin.ModeNeverListen)
	b, err := yaml.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	c.release = filepath.Join(n.Root, "release.yaml")
	if err := os.WriteFile(c.release, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, node: n}
	c.before = f.manifests()
	return c
}

// args are the global flags every invocation gets: the node's directories,
// scans scoped to the kubelet stand-in's tree, deadlines for the test bed.
func (c *crashNode) args(extra ...string) []string {
	argv := append(extra, "--manifest-dir", c.node.ManifestDir, "--state-dir", c.stateDir,
		"--proc-scope", strconv.Itoa(c.node.KubeletPID), "--log-level", "info")
	if len(extra) > 0 && slices.Contains([]string{"run", "resume", "rollback"}, extra[0]) {
		// The transaction flags: only the commands that drive one take them.
		argv = append(argv, "--replace-timeout", "20s", "--active-timeout", "3s", "--stop-timeout", "10s", "--soak", "1s")
	}
	return argv
}

// run runs the binary to its end and returns its exit code (-1 when
// SIGKILLed, as a fault point does; any other signal fails the test); want
// >= 0 asserts it.
func (c *crashNode) run(want int, faultAt string, args ...string) int {
	c.t.Helper()
	code, _ := c.exec(want, runbin.Command(runbin.Stratum(c.t), faultAt, c.args(args...)...), fmt.Sprintf("fault %q", faultAt), args)
	return code
}

// exec runs cmd (stratum-upgrade args, described by how) to its end and
// returns its exit code and output; want >= 0 asserts the code.
func (c *crashNode) exec(want int, cmd *exec.Cmd, how string, args []string) (int, string) {
	c.t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	code, err := runbin.ExitCode(cmd.Run())
	if err != nil {
		c.t.Fatalf("%v: %v\n%s", args, err, out.String())
	}
	if want >= 0 && code != want {
		c.t.Fatalf("stratum-upgrade %s (%s) exited %d, want %d:\n%s", strings.Join(args, " "), how, code, want, out.String())
	}
	c.t.Logf("stratum-upgrade %s (%s): exit %d\n%s", strings.Join(args, " "), how, code, runbin.LastLines(out.String(), 6))
	return code, out.String()
}

// converged resumes and checks the end state.
func (c *crashNode) resumeAndCheck(want Outcome) {
	c.t.Helper()
	code := 0
	if want == RolledBack {
		code = 3
	}
	c.run(code, "", "resume")
	j, err := journal.Open(filepath.Join(c.stateDir, "stratum.db"), journal.Options{ReadOnly: true})
	if err != nil {
		c.t.Fatal(err)
	}
	defer j.Close()
	checkConverged(c.t, c.node, j, want, c.before)
}

// TestCrashMatrix runs its cases in parallel (go test's -parallel, by
// default one per core): each is its own node, and every scan the binary
// makes is scoped to that node's kubelet stand-in (--proc-scope). Unless
// STRATUM_MATRIX=full, a sample of the points (sample_test.go).
func TestCrashMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("crash matrix: every step boundary, each on a fresh node")
	}
	t.Parallel() // beside the other matrices: most of a case is waiting
	probe := testbed.Options{}
	st := mustState(t, probe)
	s := newSampler("TestCrashMatrix")
	t.Run("upgrade", func(t *testing.T) {
		all := fault.UpgradePoints(manifest.NamesFor(st))
		pts := s.points("upgrade", all, nil)
		s.logPicked(t, len(pts), len(all))
		for _, pt := range pts {
			t.Run(string(pt), func(t *testing.T) {
				t.Parallel()
				c := newCrashNode(t, "")
				if code := c.run(-1, string(pt), "run", "--to", c.release); code != -1 {
					t.Fatalf("the run was not killed at %s (exit %d): the point is not on the path", pt, code)
				}
				c.resumeAndCheck(Committed)
			})
		}
	})
	t.Run("surge", func(t *testing.T) {
		// The points only a surge passes, on a node whose API-serving
		// components run with port sharing (the others are upgrade's).
		if os.Geteuid() != 0 {
			t.Skip("surge needs pod cgroups: the kubelet stand-in makes them as root")
		}
		surging := []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}
		var all []fault.Point
		for _, comp := range surging {
			all = append(all, fault.AfterSurgeWrite.Of(comp), fault.AfterSurgeActive.Of(comp), fault.AfterSurgeRemoved.Of(comp))
		}
		pts := s.points("surge", all, nil)
		s.logPicked(t, len(pts), len(all))
		sharing := testbed.Options{Mutate: func(st *nodestate.NodeState) {
			for _, comp := range surging {
				withPortSharing(st, comp)
			}
		}}
		for _, pt := range pts {
			t.Run(string(pt), func(t *testing.T) {
				t.Parallel()
				c := newCrashNodeWith(t, "", sharing)
				if code := c.run(-1, string(pt), "run", "--to", c.release); code != -1 {
					t.Fatalf("the run was not killed at %s (exit %d): the point is not on the path", pt, code)
				}
				c.resumeAndCheck(Committed)
				if left, err := c.node.Store.SurgeFiles(); err != nil || len(left) > 0 {
					t.Errorf("surge copies after resume: %v %v", left, err)
				}
			})
		}
	})
	t.Run("rollback", func(t *testing.T) {
		all := fault.RollbackPoints(manifest.NamesFor(st))
		// The paths memScenarios' rollback does not take (etcd's data is
		// downgraded, not restored) are skipped.
		var skip map[fault.Point]string
		for _, sc := range memScenarios(st) {
			if sc.name == "rollback" {
				skip = sc.notOnPath
			}
		}
		pts := s.points("rollback", all, skip)
		s.logPicked(t, len(pts), len(all))
		for _, pt := range pts {
			t.Run(string(pt), func(t *testing.T) {
				if why, ok := skip[pt]; ok {
					t.Skip("not on the path: " + why)
				}
				t.Parallel()
				c := newCrashNode(t, nodestate.Scheduler)
				if code := c.run(-1, string(pt), "run", "--to", c.release); code != -1 {
					t.Fatalf("the run was not killed at %s (exit %d): the point is not on the path", pt, code)
				}
				c.resumeAndCheck(RolledBack)
			})
		}
	})
}

// mustState is the node state a default test bed node runs, without
// starting one: the roster is all the matrix needs.
func mustState(t *testing.T, _ testbed.Options) *nodestate.NodeState {
	st, err := nodestate.Load(filepath.Join("..", "testdata", "states", "default.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCrashRandom SIGKILLs the binary at a random instant of an upgrade
// (half of them failing, so the kill may land in the rollback) and checks
// that resume converges. STRATUM_TORTURE=N runs N rounds (make torture);
// CI runs a few. The seed is printed; STRATUM_SEED replays one.
func TestCrashRandom(t *testing.T) {
	if testing.Short() {
		t.Skip("randomized crashes")
	}
	t.Parallel() // beside the other matrices: most of a case is waiting
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("STRATUM_TORTURE")); err == nil && v > 0 {
		rounds = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("STRATUM_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (replay with STRATUM_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	for i := 0; i < rounds; i++ {
		failing := rng.IntN(2) == 1
		delay := time.Duration(rng.IntN(6000)) * time.Millisecond
		t.Run(fmt.Sprintf("round%d-failing=%v-kill-after-%s", i, failing, delay), func(t *testing.T) {
			t.Parallel() // each round is a node of its own, as in TestCrashMatrix
			fail := ""
			if failing {
				fail = nodestate.Scheduler
			}
			c := newCrashNode(t, fail)
			_, before := c.transactions()
			cmd := runbin.Command(runbin.Stratum(t), "", c.args("run", "--to", c.release)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(delay):
				runbin.KillGroup(cmd)
				<-done
			}
			t.Logf("run: exit %d\n%s", cmd.ProcessState.ExitCode(), runbin.LastLines(out.String(), 4))
			want := Committed
			if failing {
				want = RolledBack
			}
			// The kill may have landed before the transaction began (a
			// short delay on a loaded machine): resume has nothing to do
			// and nothing may have changed.
			if open, n := c.transactions(); !open && n == before {
				c.run(0, "", "resume")
				if now := (&fixture{t: t, node: c.node}).manifests(); !sameFiles(now, c.before) {
					t.Error("the run was killed before its transaction began, yet the manifests changed")
				}
				return
			}
			// The run may have finished (or ended its transaction) before
			// the kill: then resume has nothing to do and exits 0 whatever
			// the outcome was.
			if open, _ := c.transactions(); cmd.ProcessState.ExitCode() >= 0 || !open {
				c.run(0, "", "resume")
				j, err := journal.Open(filepath.Join(c.stateDir, "stratum.db"), journal.Options{ReadOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				defer j.Close()
				checkConverged(t, c.node, j, want, c.before)
				return
			}
			c.resumeAndCheck(want)
		})
	}
}

// transactions reads the node's journal: whether a transaction is open,
// and how many it holds in all.
func (c *crashNode) transactions() (open bool, n int) {
	c.t.Helper()
	j, err := journal.Open(filepath.Join(c.stateDir, "stratum.db"), journal.Options{ReadOnly: true})
	if err != nil {
		c.t.Fatal(err)
	}
	defer j.Close()
	txn, err := j.OpenTxn()
	if err != nil {
		c.t.Fatal(err)
	}
	hist, err := j.History(0)
	if err != nil {
		c.t.Fatal(err)
	}
	return txn != nil, len(hist)
}
