package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/cluster"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/proc"
)

// The tests in this file hold every --output json line of every command to
// its schema in docs/schemas (docs/cli.md#json-output): the schemas close
// every object (additionalProperties false) and require every property, so
// a field the code adds or drops fails here.

const schemaDir = "../../docs/schemas"

// schemaBase is the $id prefix of every schema in docs/schemas.
const schemaBase = "https://github.com/ciq/stratum-upgrade/docs/schemas/"

// loadSchemas compiles every schema in docs/schemas, by file name.
func loadSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema in %s (%v)", schemaDir, err)
	}
	c := jsonschema.NewCompiler()
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := c.AddResource(schemaBase+filepath.Base(f), doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, f := range files {
		sch, err := c.Compile(schemaBase + filepath.Base(f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = sch
	}
	return out
}

// Every object a schema describes is closed and requires each of its
// properties: "every documented field always present" holds only if the
// schema says so.
func TestSchemasCloseEveryObject(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(schemaDir, "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if m, _ := doc.(map[string]any); m["$schema"] != "https://json-schema.org/draft/2020-12/schema" || m["$id"] != schemaBase+filepath.Base(f) {
			t.Errorf("%s: $schema must be draft 2020-12 and $id %s", f, schemaBase+filepath.Base(f))
		}
		walkSchema(doc, "#", func(ptr string, obj map[string]any) {
			props, ok := obj["properties"].(map[string]any)
			if !ok {
				return
			}
			if obj["additionalProperties"] != false {
				t.Errorf("%s %s: an object with properties must have additionalProperties false", f, ptr)
			}
			var req []string
			for _, r := range asSlice(obj["required"]) {
				req = append(req, r.(string))
			}
			for name := range props {
				if !slices.Contains(req, name) {
					t.Errorf("%s %s: property %q is not required (a documented field is always present: null when unset)", f, ptr, name)
				}
			}
		})
	}
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// walkSchema calls fn for every JSON object in v, with its pointer.
func walkSchema(v any, ptr string, fn func(string, map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		fn(ptr, x)
		for k, c := range x {
			walkSchema(c, ptr+"/"+k, fn)
		}
	case []any:
		for i, c := range x {
			walkSchema(c, ptr+"/"+strconv.Itoa(i), fn)
		}
	}
}

// jsonNode is a scratch node for the JSON output test: a state file, a
// manifest and a state directory in a temporary directory.
type jsonNode struct {
	t                      *testing.T
	dir, manifests, states string
	schemas                map[string]*jsonschema.Schema
	seen                   map[string]bool // schemas a line was checked against
	// output is --output: json, or yaml, whose documents are checked
	// against the same schemas once converted to JSON.
	output string
}

func newJSONNode(t *testing.T) *jsonNode {
	dir := t.TempDir()
	n := &jsonNode{t: t, dir: dir, manifests: filepath.Join(dir, "manifests"), states: filepath.Join(dir, "state"), schemas: loadSchemas(t), seen: map[string]bool{}, output: "json"}
	b, err := os.ReadFile("../../testdata/states/default-vip.yaml")
	if err != nil {
		t.Fatal(err)
	}
	st := strings.Replace(string(b), "  memberName: cp-1\n", "  memberName: cp-1\n  dataDir: "+filepath.Join(dir, "etcd")+"\n", 1) +
		"pkiDir: " + filepath.Join(dir, "pki") + "\nkubeconfigDir: " + filepath.Join(dir, "kube") + "\nconfigDir: " + filepath.Join(dir, "config") + "\n"
	n.write("state.yaml", st)
	n.write("sched.yaml", "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.4\nimages:\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.5\n")
	n.write("same.yaml", "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.4\nimages:\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.34.4\n")
	n.write("skip.yaml", "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.36.0\nimages:\n  kube-apiserver: registry.k8s.io/kube-apiserver:v1.36.0\n")
	return n
}

func (n *jsonNode) write(name, content string) {
	if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
}

func (n *jsonNode) path(name string) string { return filepath.Join(n.dir, name) }

// su runs stratum-upgrade args with --output json on the node, wants exit
// code want, and checks every line of stdout: one JSON object each, the
// last one an error line (error.json) exactly when the exit code is not 0,
// every other one valid against schema.
func (n *jsonNode) su(want int, schema string, args ...string) []map[string]any {
	n.t.Helper()
	argv := append([]string{"--manifest-dir", n.manifests, "--state-dir", n.states, "--proc-scope", "self", "--lock-timeout", "200ms", "--output", n.output}, args...)
	// A child process each: a command holds the manifest directory's lock
	// until its process exits.
	cmd := exec.Command(os.Args[0], argv...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		n.t.Fatal(err)
	}
	what := strings.Join(args, " ")
	if code != want {
		n.t.Fatalf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, code, want, stdout.String(), stderr.String())
	}
	text := stdout.String()
	if !strings.HasSuffix(text, "\n") {
		n.t.Fatalf("%s: stdout does not end in a newline: %q", what, text)
	}
	var objs []map[string]any
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if n.output == "yaml" {
		lines = yamlDocs(n.t, what, text)
	}
	for i, line := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			n.t.Fatalf("%s: line %d is not one JSON object (%v): %s", what, i+1, err, line)
		}
		s := schema
		if i == len(lines)-1 && code != ExitOK {
			s = "error.json"
			if obj["error"] == nil {
				n.t.Errorf("%s: exit %d but the last line is no error line: %s", what, code, line)
			}
		}
		n.validate(what, s, line)
		objs = append(objs, obj)
	}
	if code == ExitOK && len(objs) > 0 && objs[len(objs)-1]["error"] != nil {
		n.t.Errorf("%s: exit 0 with an error line", what)
	}
	return objs
}

// yamlDocs is each document of a --output yaml stream as one line of JSON:
// every document starts with "---".
func yamlDocs(t *testing.T, what, text string) []string {
	t.Helper()
	if !strings.HasPrefix(text, "---\n") {
		t.Fatalf("%s: YAML output does not start with ---:\n%s", what, text)
	}
	var out []string
	for _, doc := range strings.Split(strings.TrimPrefix(text, "---\n"), "\n---\n") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: a document is not YAML (%v):\n%s", what, err, doc)
		}
		out = append(out, string(j))
	}
	return out
}

func (n *jsonNode) validate(what, schema, line string) {
	n.t.Helper()
	sch, ok := n.schemas[schema]
	if !ok {
		n.t.Fatalf("no schema %s", schema)
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
	if err != nil {
		n.t.Fatal(err)
	}
	if err := sch.Validate(v); err != nil {
		n.t.Errorf("%s: a line does not validate against %s:\n%s\n%v", what, schema, line, err)
	}
	n.seen[schema] = true
}

// TestJSONOutputSchemas runs every command with --output json through the
// states a node goes through, and validates every line.
func TestJSONOutputSchemas(t *testing.T) {
	n := newJSONNode(t)

	// Before anything was imported; usage errors.
	n.su(ExitOK, "version.json", "version")
	n.su(ExitOK, "status.json", "status")
	n.su(ExitOK, "history.json", "history")
	n.su(ExitError, "", "history", "20261202T130405Z-1a2b")
	n.su(ExitOK, "run.json", "resume")
	n.su(ExitError, "", "audit")
	n.su(ExitUsage, "", "frobnicate")
	n.su(ExitUsage, "", "status", "--bogus")
	n.su(ExitError, "", "plan") // no journal: nothing to list
	n.su(ExitUsage, "", "plan", "--to", "v1.36")
	n.su(ExitError, "", "render")

	n.su(ExitOK, "dry-run.json", "init", "--dry-run", "--state", n.path("state.yaml"))
	n.su(ExitOK, "write.json", "init", "--state", n.path("state.yaml"))
	// No etcd runs here: the member count a healthy single-member etcd
	// would have given is kept, as the engine keeps it.
	if err := cluster.SaveMembers(filepath.Join(n.states, cluster.MembersFile), cluster.Members{Count: 1, At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	n.su(ExitError, "", "init", "--state", n.path("state.yaml"))
	n.su(ExitOK, "write.json", "render")
	n.su(ExitOK, "status.json", "status")
	n.su(ExitOK, "history.json", "history")
	n.su(ExitOK, "audit.json", "audit")
	// Dry runs: the plan of each writing command, nothing written (the
	// history below has the one run's transaction only).
	before := dirFiles(t, n.manifests)
	if objs := n.su(ExitOK, "dry-run.json", "render", "--dry-run"); objs[0]["nothingToDo"] != true {
		t.Errorf("render --dry-run of a rendered node: %v", objs[0])
	}
	if objs := n.su(ExitOK, "dry-run.json", "restart", "--dry-run", "kube-scheduler"); len(objs[0]["changes"].([]any)) != 1 {
		t.Errorf("restart --dry-run kube-scheduler: %v", objs[0])
	}
	n.su(ExitOK, "dry-run.json", "restart", "--dry-run", "--changed")
	if objs := n.su(ExitOK, "dry-run.json", "stop", "--dry-run", "kube-scheduler"); objs[0]["changes"].([]any)[0].(map[string]any)["removed"] != true {
		t.Errorf("stop --dry-run kube-scheduler: %v", objs[0])
	}
	n.su(ExitOK, "dry-run.json", "start", "--dry-run", "--all")
	n.su(ExitOK, "plan.json", "run", "--dry-run", "--to", n.path("sched.yaml"))
	n.su(ExitOK, "plan.json", "apply", "--dry-run", "--state", n.path("state.yaml"))
	if after := dirFiles(t, n.manifests); !maps.Equal(before, after) {
		t.Errorf("a dry run changed the manifest directory")
	}
	n.su(ExitUsage, "", "audit", "kube-proxy")
	if err := os.Remove(filepath.Join(n.manifests, "kube-vip.yaml")); err != nil {
		t.Fatal(err)
	}
	if objs := n.su(ExitError, "audit.json", "audit"); len(objs) != 2 {
		t.Errorf("an incomplete audit: %d lines, want the audit and the error", len(objs))
	}
	n.su(ExitOK, "write.json", "render")

	n.su(ExitOK, "available.json", "plan")
	n.su(ExitOK, "plan.json", "plan", "--to", n.path("sched.yaml"))
	n.su(ExitOK, "images.json", "images", "list", "--to", n.path("sched.yaml"))
	n.su(ExitOK, "plan.json", "plan", "--to", n.path("same.yaml"))
	// A refused plan still shows its diff, the failures first (issue 32):
	// the plan line with failedChecks, then the error line.
	if objs := n.su(ExitError, "plan.json", "plan", "--to", n.path("skip.yaml")); len(objs) != 2 || len(objs[0]["failedChecks"].([]any)) == 0 || len(objs[0]["changes"].([]any)) == 0 {
		t.Errorf("a refused plan: %v", objs)
	}
	n.su(ExitOK, "plan.json", "plan", "--to", n.path("skip.yaml"), "--ignore-preflight-errors", "all")
	n.su(ExitError, "run.json", "run", "--to", n.path("skip.yaml"))
	n.su(ExitOK, "run.json", "run", "--to", n.path("same.yaml"))

	// A run with no kubelet: events, the result (rollback-failed), the
	// error line.
	objs := n.su(ExitRollbackFailed, "run.json", "run", "--to", n.path("sched.yaml"), "--replace-timeout", "300ms", "--active-timeout", "300ms", "--soak", "100ms")
	if len(objs) < 4 {
		t.Errorf("run: %d lines, want events, the result and the error", len(objs))
	}
	hist := n.su(ExitOK, "history.json", "history")
	txns, _ := hist[0]["transactions"].([]any)
	if len(txns) != 1 {
		t.Fatalf("history: %d transactions, want 1", len(txns))
	}
	id := txns[0].(map[string]any)["id"].(string)
	n.su(ExitOK, "history-txn.json", "history", id)
	n.su(ExitOK, "status.json", "status")
	n.su(ExitOK, "prepare.json", "resume", "--prepare")
	n.su(ExitOK, "run.json", "resume")
	n.su(ExitError, "run.json", "rollback")
	n.su(ExitError, "run.json", "rollback", "--last")

	// An open transaction (begun by hand: a crash mid-upgrade leaves the
	// same) with an etcd backup, an ignored check and a mark.
	j, err := journal.Open(filepath.Join(n.states, JournalFile), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.ReadFile(n.path("state.yaml"))
	open, err := j.Begin(journal.Txn{
		Kind: journal.KindUpgrade, From: st, To: st, Changed: []string{"kube-scheduler"}, SnapshotDir: filepath.Join(n.states, "snapshots", "x"),
		EtcdBackup:    []byte(`{"path":"/var/lib/stratum/snapshots/x.etcd.db","sha256":"ab","size":10,"revision":7,"memberID":"1","members":1,"version":"3.5.35","taken":"2026-12-02T13:04:05Z"}`),
		IgnoredChecks: []journal.IgnoredCheck{{Check: "ComponentSkew", Component: "kube-scheduler", Message: "skew"}},
	})
	if err == nil {
		_, err = j.Append(open.ID, journal.PhaseApplying, journal.Record{Step: journal.StepMark, Component: "kube-scheduler", ProcMark: &proc.Mark{Ticks: 5, BootID: "b"}, Stamp: "s"})
	}
	if err != nil {
		t.Fatal(err)
	}
	// Held open: the journal is locked, status shows the progress file.
	n.su(ExitOK, "status.json", "status")
	n.su(ExitBusy, "", "render")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	status := n.su(ExitOK, "status.json", "status")
	if status[0]["openTransaction"] == nil || status[0]["lastRecord"] == nil {
		t.Errorf("status of an open transaction: %v", status[0])
	}
	n.su(ExitOK, "history-txn.json", "history", open.ID)
	n.su(ExitOK, "prepare.json", "resume", "--prepare")
	n.su(ExitBusy, "", "plan", "--to", n.path("sched.yaml"))

	// init --from-kubeadm without --yes, on the real kubeadm's manifests.
	kubeadm := filepath.Join(n.dir, "kubeadm-manifests")
	fixture := filepath.Join("..", "..", "testdata", "kubeadm", "v1.37.2", "defaults")
	if err := os.CopyFS(kubeadm, os.DirFS(filepath.Join(fixture, "manifests"))); err != nil {
		t.Fatal(err)
	}
	adopt := n.su(ExitOK, "adopt.json", "init", "--from-kubeadm", "--manifest-dir", kubeadm, "--state-dir", filepath.Join(n.dir, "adopt-state"),
		"--kubeadm-config", filepath.Join(fixture, "kubeadm.yaml"))
	if r, _ := adopt[0]["restarts"].([]any); len(r) != 0 || len(adopt[0]["components"].([]any)) != 4 {
		t.Errorf("adoption of kubeadm's manifests: %v", adopt[0])
	}
	if _, err := os.Stat(filepath.Join(n.dir, "adopt-state")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("init --from-kubeadm without --yes made the state directory: %v", err)
	}

	for _, s := range []string{"adopt.json", "available.json", "audit.json", "dry-run.json", "error.json", "history-txn.json", "history.json", "images.json", "plan.json", "prepare.json", "run.json", "status.json", "version.json", "write.json"} {
		if !n.seen[s] {
			t.Errorf("no output was checked against %s", s)
		}
	}
	// defs.json is no output's; cluster.json is checked by
	// TestClusterJSONSchema (status --cluster needs a multi-member cluster),
	// forget-node.json by TestForgetNodeCommand (against a real etcd).
	if len(n.seen)+3 != len(n.schemas) {
		t.Errorf("%d schemas in %s, %d used: a schema without a test", len(n.schemas), schemaDir, len(n.seen))
	}
}

// TestYAMLOutput: -o yaml wherever -o json exists: the same objects as
// YAML documents, each valid against the JSON schema, errors included.
func TestYAMLOutput(t *testing.T) {
	n := newJSONNode(t)
	n.output = "yaml"
	n.su(ExitOK, "version.json", "version")
	n.su(ExitOK, "status.json", "status")
	n.su(ExitUsage, "", "frobnicate")
	n.su(ExitOK, "write.json", "init", "--state", n.path("state.yaml"))
	if err := cluster.SaveMembers(filepath.Join(n.states, cluster.MembersFile), cluster.Members{Count: 1, At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	n.su(ExitOK, "write.json", "render")
	n.su(ExitOK, "history.json", "history")
	n.su(ExitOK, "audit.json", "audit")
	n.su(ExitOK, "plan.json", "plan", "--to", n.path("sched.yaml"))
	n.su(ExitOK, "prepare.json", "resume", "--prepare")
	// A stream of documents: run's final line, then the error line.
	if objs := n.su(ExitError, "run.json", "run", "--to", n.path("skip.yaml")); len(objs) != 2 {
		t.Errorf("a refused run: %d documents, want the result and the error", len(objs))
	}
}

// dirFiles is every file of dir with its content.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
