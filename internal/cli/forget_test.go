package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
)

// forgetCoordinator is node's coordinator on the one-member cluster c,
// with a 2 s lease.
func forgetCoordinator(t *testing.T, c *etcdcluster.Cluster, node string) *cluster.Coordinator {
	t.Helper()
	co, err := cluster.Connect(context.Background(), cluster.Config{
		Local: etcddata.ClientConfig{Endpoint: c.Members[0].ClientURL, DialTimeout: 5 * time.Second}, Node: node, TTL: 2 * time.Second, Wait: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	return co
}

// beginTxn has co's node begin txn and leaves it open, holding the lock.
func beginTxn(t *testing.T, co *cluster.Coordinator, txn string) *cluster.Hold {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := co.Acquire(ctx, "upgrade", "")
	if err == nil {
		err = h.Begin(ctx, cluster.Progress{Txn: txn, Kind: "upgrade", Phase: "applying"})
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// forgetCmd runs forget-node's body as node-2 through co, in text or
// json, and returns stdout, the error as Main would print it, and the
// error.
func forgetCmd(co *cluster.Coordinator, output, node, reason string) (string, string, error) {
	var out bytes.Buffer
	g := &globals{stdout: &out, stderr: io.Discard, output: output, stateDir: "/srv/stratum", log: slog.New(slog.DiscardHandler)}
	err := g.forgetNode(context.Background(), co, node, reason)
	return out.String(), g.withAdvice(err), err
}

// forget-node against a real etcd: refused while the node's lease is
// alive (exit 5, saying it is not dead), then, once it has expired, it
// closes the node's transaction and says so in text and in JSON that
// validates against docs/schemas/forget-node.json; a second time is
// nothing to do; a halt is reported, not cleared; an unknown node and this
// node are bad usage with the command to run.
func TestForgetNodeCommand(t *testing.T) {
	sch := loadSchemas(t)["forget-node.json"]
	if sch == nil {
		t.Fatal("no docs/schemas/forget-node.json")
	}
	validate := func(line string) map[string]any {
		t.Helper()
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
		if err != nil {
			t.Fatalf("not JSON: %v\n%s", err, line)
		}
		if err := sch.Validate(doc); err != nil {
			t.Fatalf("does not validate against forget-node.json:\n%s\n%v", line, err)
		}
		return doc.(map[string]any)
	}
	c := etcdcluster.Start(t, 1, "3.6")
	one := forgetCoordinator(t, c, "node-1")
	beginTxn(t, one, "t1")
	two := forgetCoordinator(t, c, "node-2")

	out, msg, err := forgetCmd(two, "text", "node-1", "disk died")
	if ExitCode(err) != ExitBusy || out != "" {
		t.Fatalf("forget-node of a live node: exit %d (%v), stdout %q; want 5 and nothing", ExitCode(err), err, out)
	}
	for _, want := range []string{"node-1 is alive", "lease", "until", "not dead", "resume"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}

	one.Close() // node-1 dies; its lease runs out after 2 s
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, msg, err = forgetCmd(two, "json", "node-1", "disk died")
		if !errors.Is(err, cluster.ErrNodeAlive) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("forget-node after node-1's lease expired: %s", msg)
	}
	doc := validate(strings.TrimSuffix(out, "\n"))
	after, _ := doc["after"].(map[string]any)
	if doc["forgotten"] != true || doc["by"] != "node-2" || doc["reason"] != "disk died" || after["outcome"] != "forgotten" || after["open"] != false {
		t.Fatalf("forget-node -o json: %s", out)
	}

	out, _, err = forgetCmd(two, "json", "node-1", "again")
	if doc := validate(strings.TrimSuffix(out, "\n")); err != nil || doc["forgotten"] != false || doc["after"] != nil || doc["by"] != nil {
		t.Fatalf("forget-node a second time: %v, %s; want nothing to do", err, out)
	}

	// node-3 goes on, dies too, and meanwhile the rollout was halted.
	three := forgetCoordinator(t, c, "node-3")
	beginTxn(t, three, "t3").Release()
	if _, err := c.Client(t).Put(context.Background(), cluster.Prefix+"halt",
		`{"node":"node-4","txn":"t4","outcome":"rolled-back","reason":"scheduler did not answer","at":"2026-12-04T13:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	out, msg, err = forgetCmd(two, "text", "node-3", "machine scrapped")
	if err != nil {
		t.Fatalf("forget-node node-3: %s", msg)
	}
	for _, want := range []string{"forgot node node-3", "t3", "forgotten by node-2", "machine scrapped", "etcdctl member remove", "still HALTED", "node-4", "clear-halt --state-dir /srv/stratum"} {
		if !strings.Contains(out, want) {
			t.Errorf("forget-node's output does not say %q:\n%s", want, out)
		}
	}
	if r, err := c.Client(t).Get(context.Background(), cluster.Prefix+"halt", clientv3.WithCountOnly()); err != nil || r.Count != 1 {
		t.Errorf("forget-node cleared the halt (%v)", err)
	}
	out, _, err = forgetCmd(two, "text", "node-3", "again")
	if err != nil || !strings.HasPrefix(out, "nothing to do: node node-3 has no open transaction") {
		t.Errorf("forget-node node-3 again: %v, %q", err, out)
	}

	_, msg, err = forgetCmd(two, "text", "node-9", "typo")
	if ExitCode(err) != ExitUsage || !strings.Contains(msg, "node-1, node-3") || !strings.Contains(msg, "status --cluster --state-dir /srv/stratum") {
		t.Errorf("forget-node of an unknown node: exit %d, %s", ExitCode(err), msg)
	}
	_, msg, err = forgetCmd(two, "text", "node-2", "me")
	if ExitCode(err) != ExitUsage || !strings.Contains(msg, "resume --state-dir /srv/stratum") {
		t.Errorf("forget-node of this node: exit %d, %s", ExitCode(err), msg)
	}
}

// The command line: one NODE and a --reason, or bad usage before anything
// is read; a node without a journal says so.
func TestForgetNodeUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"forget-node", "--reason", "x"}, ExitUsage, "takes one NODE"},
		{[]string{"forget-node", "a", "b", "--reason", "x"}, ExitUsage, "takes one NODE"},
		{[]string{"forget-node", "", "--reason", "x"}, ExitUsage, "takes one NODE"},
		{[]string{"forget-node", "cp-3"}, ExitUsage, "--reason TEXT is required"},
		{[]string{"forget-node", "cp-3", "--reason", " "}, ExitUsage, "--reason TEXT is required"},
		{[]string{"forget-node", "cp-3", "--reason", "gone"}, ExitError, "init --state FILE"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(append(tc.args, "--state-dir", dir), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, want %d saying %q:\n%s", tc.args, code, tc.code, tc.want, stderr.String())
		}
	}
	// Completion without a journal (so no etcd to ask): no suggestion, no
	// file names, no error.
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"__complete", "--state-dir", dir, "forget-node", ""}, &stdout, &stderr); code != ExitOK || stdout.String() != ":4\n" {
		t.Errorf("completion of NODE: exit %d, %q, want no suggestion and directive 4 (no files)\n%s", code, stdout.String(), stderr.String())
	}
}

// A node that gives up on another node's open transaction is told, beside
// resuming it there, how to go on without a node that will never run again.
func TestBusyAdviceNamesForgetNode(t *testing.T) {
	g := &globals{stateDir: "/srv/stratum"}
	busy := fmt.Errorf("run: %w (waited 30m0s)", &cluster.BusyError{Progress: cluster.Progress{Node: "cp-3", Txn: "t3", Kind: "upgrade", Phase: "applying"}})
	msg := g.withAdvice(busy)
	for _, want := range []string{"stratum-upgrade resume` on cp-3", "`stratum-upgrade forget-node cp-3 --reason TEXT --state-dir /srv/stratum`", "died for good"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not say %q", msg, want)
		}
	}
}
