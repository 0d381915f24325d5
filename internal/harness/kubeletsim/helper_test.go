package kubeletsim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the container program: with KSIM_HELPER set
// (by the image map's env, since a container gets nothing else) it records
// its argv and environment and behaves as the mode says.
const helperEnv = "KSIM_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

type helperRecord struct {
	PID  int      `json:"pid"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
}

func helper(mode string) int {
	if mode == "ignore-term" {
		signal.Ignore(syscall.SIGTERM) // before the record the test waits for
	}
	if out := os.Getenv("KSIM_OUT"); out != "" {
		b, _ := json.Marshal(helperRecord{PID: os.Getpid(), Argv: os.Args, Env: os.Environ()})
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err == nil {
			_, _ = f.Write(append(b, '\n'))
			f.Close()
		}
	}
	switch mode {
	case "run":
		time.Sleep(time.Hour) // SIGTERM's default action ends it
		return 0
	case "ignore-term":
		time.Sleep(time.Hour)
		return 0
	case "exit":
		if d, err := time.ParseDuration(os.Getenv("KSIM_AFTER")); err == nil {
			time.Sleep(d)
		}
		code, _ := strconv.Atoi(os.Getenv("KSIM_CODE"))
		return code
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 3
	}
}

const (
	imgRun        = "registry.test/helper:run"
	imgIgnoreTerm = "registry.test/helper:ignore-term"
	imgExit1      = "registry.test/helper:exit1"
	imgSlowExit1  = "registry.test/helper:slow-exit1" // runs 250ms, then exits 1
	node          = "Node1"                           // upper case: the key suffix is lowercased
)

type bed struct {
	t      *testing.T
	k      *Kubelet
	dir    string // manifest dir
	root   string
	out    string // helper records
	images string // image map file
	stop   func()
}

// testConfig is the tiny time scale of the rule tests.
func testConfig() Config {
	return Config{
		NodeName:       node,
		RelistInterval: 200 * time.Millisecond,
		StartDelay:     20 * time.Millisecond,
		GraceFloor:     100 * time.Millisecond,
		GraceCap:       300 * time.Millisecond,
		BackoffBase:    50 * time.Millisecond,
		BackoffCap:     400 * time.Millisecond,
		Housekeeping:   50 * time.Millisecond,
	}
}

func newBed(t *testing.T, mut func(*Config)) *bed {
	t.Helper()
	tmp := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{t: t, dir: filepath.Join(tmp, "manifests"), root: filepath.Join(tmp, "root"), out: filepath.Join(tmp, "helper.jsonl"), images: filepath.Join(tmp, "images.yaml")}
	if err := os.Mkdir(b.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(mode string, extra ...string) map[string]string {
		m := map[string]string{helperEnv: mode, "KSIM_OUT": b.out}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	images := ImageMap{
		imgRun:        {Binary: self, Env: env("run", "FROM_IMAGE", "image", "OVERRIDDEN", "image")},
		imgIgnoreTerm: {Binary: self, Env: env("ignore-term")},
		imgExit1:      {Binary: self, Env: env("exit", "KSIM_CODE", "1")},
		imgSlowExit1:  {Binary: self, Env: env("exit", "KSIM_CODE", "1", "KSIM_AFTER", "250ms")},
	}
	if err := images.Save(b.images); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.ManifestDir, cfg.RootDir, cfg.ImageMapFile = b.dir, b.root, b.images
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if mut != nil {
		mut(&cfg)
	}
	k, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.k = k
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	b.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("kubelet stand-in did not stop within 30s")
		}
	}
	t.Cleanup(func() {
		b.stop()
		for _, p := range k.Pods() {
			if p.PID != 0 {
				t.Errorf("pod %s still has pid %d after stop", p.Key, p.PID)
			}
		}
		for _, e := range k.History() {
			if e.Kind == EventStart && alive(e.PID) {
				t.Errorf("process %d (%s) is still alive after the stand-in stopped", e.PID, e.Key)
			}
		}
	})
	if _, err := NewClient(b.root, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return b
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

func (b *bed) write(name, content string) {
	b.t.Helper()
	if err := os.WriteFile(filepath.Join(b.dir, name), []byte(content), 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// writeAtomic puts content at name the safe way: hidden temp, rename.
func (b *bed) writeAtomic(name, content string) {
	b.t.Helper()
	tmp := filepath.Join(b.dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		b.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(b.dir, name)); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) remove(name string) {
	b.t.Helper()
	if err := os.Remove(filepath.Join(b.dir, name)); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) path(name string) string { return filepath.Join(b.dir, name) }

// relist runs one relist now and returns when it is done.
func (b *bed) relist() {
	done := make(chan struct{})
	b.k.relistNow <- done
	<-done
}

func (b *bed) handled() int {
	b.k.mu.Lock()
	defer b.k.mu.Unlock()
	return b.k.handled
}

func (b *bed) waitFor(what string, cond func([]PodStatus) bool) []PodStatus {
	b.t.Helper()
	if err := b.k.WaitFor(what, 20*time.Second, cond); err != nil {
		b.t.Fatal(err)
	}
	return b.k.Pods()
}

// waitRunning waits until key has exactly one pod worker and it runs, and
// returns it.
func (b *bed) waitRunning(key string, extra func(PodStatus) bool) PodStatus {
	b.t.Helper()
	st := b.waitFor(key+" running", func(st []PodStatus) bool {
		ps := Find(st, key)
		return len(ps) == 1 && ps[0].State == StateRunning && (extra == nil || extra(ps[0]))
	})
	return Find(st, key)[0]
}

func (b *bed) waitGone(key string) {
	b.t.Helper()
	b.waitFor(key+" gone", func(st []PodStatus) bool { return len(Find(st, key)) == 0 })
}

func (b *bed) starts(key string) []Event {
	var out []Event
	for _, e := range b.k.History() {
		if e.Kind == EventStart && e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// record waits for the helper record of pid.
func (b *bed) record(pid int) helperRecord {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range b.records() {
			if r.PID == pid {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.t.Fatalf("no helper record from pid %d within 10s", pid)
	return helperRecord{}
}

func (b *bed) records() []helperRecord {
	b.t.Helper()
	data, err := os.ReadFile(b.out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		b.t.Fatal(err)
	}
	var out []helperRecord
	complete, _ := strings.CutSuffix(string(data[:strings.LastIndexByte(string(data), '\n')+1]), "\n")
	if complete == "" {
		return nil // created, not yet written: each record is one write ending in a newline
	}
	for _, line := range strings.Split(complete, "\n") {
		var r helperRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			b.t.Fatalf("helper record %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// pod renders a static pod manifest.
type podOpts struct {
	name        string
	image       string
	annotations map[string]string
	command     []string
	args        []string
	env         [][2]string
	restart     string
	grace       int
	ports       []int // containerPorts (hostNetwork: host ports too)
}

func podYAML(o podOpts) string {
	if o.image == "" {
		o.image = imgRun
	}
	if o.command == nil {
		o.command = []string{o.name}
	}
	var s strings.Builder
	s.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + o.name + "\n  namespace: kube-system\n")
	if len(o.annotations) > 0 {
		s.WriteString("  annotations:\n")
		for k, v := range o.annotations {
			fmt.Fprintf(&s, "    %s: %q\n", k, v)
		}
	}
	s.WriteString("spec:\n  hostNetwork: true\n")
	if o.restart != "" {
		s.WriteString("  restartPolicy: " + o.restart + "\n")
	}
	if o.grace > 0 {
		fmt.Fprintf(&s, "  terminationGracePeriodSeconds: %d\n", o.grace)
	}
	s.WriteString("  containers:\n  - name: " + o.name + "\n    image: " + o.image + "\n    command:\n")
	for _, c := range o.command {
		fmt.Fprintf(&s, "    - %q\n", c)
	}
	if len(o.args) > 0 {
		s.WriteString("    args:\n")
		for _, a := range o.args {
			fmt.Fprintf(&s, "    - %q\n", a)
		}
	}
	if len(o.ports) > 0 {
		s.WriteString("    ports:\n")
		for i, p := range o.ports {
			fmt.Fprintf(&s, "    - name: port-%d\n      containerPort: %d\n      protocol: TCP\n", i, p)
		}
	}
	if len(o.env) > 0 {
		s.WriteString("    env:\n")
		for _, e := range o.env {
			fmt.Fprintf(&s, "    - name: %s\n      value: %q\n", e[0], e[1])
		}
	}
	return s.String()
}

func key(name string) string { return "kube-system/" + name + "-" + strings.ToLower(node) }
