package standin

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// With STANDIN_TEST_MAIN set the test binary is the stand-in itself, so the
// tests run it as a real process under a component's argv[0].
func TestMain(m *testing.M) {
	if os.Getenv("STANDIN_TEST_MAIN") != "" {
		os.Exit(Main(os.Args))
	}
	os.Exit(m.Run())
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	events string
	port   int
}

func start(t *testing.T, component string, env ...string) *proc {
	t.Helper()
	return startOn(t, component, freePort(t), nil, env...)
}

// startOn runs the stand-in as component on port, with flags added to
// its argv.
func startOn(t *testing.T, component string, port int, flags []string, env ...string) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{port: port, events: filepath.Join(t.TempDir(), "events.jsonl"), done: make(chan struct{})}
	args := append([]string{component, "--secure-port=" + strconv.Itoa(p.port), "--bind-address=127.0.0.1", "--kubeconfig=/nonexistent", "--v=2"}, flags...)
	p.cmd = &exec.Cmd{
		Path:        self,
		Args:        append(args, "manager"),
		Env:         append([]string{"STANDIN_TEST_MAIN=1", EnvEvents + "=" + p.events}, env...),
		Stderr:      testLog{t},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
	return p
}

type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) { l.t.Log(string(b)); return len(b), nil }

var client = &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func (p *proc) get(path string) (int, error) {
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", p.port, path))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// waitCode polls path until it answers code.
func (p *proc) waitCode(t *testing.T, path string, code int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		c, err := p.get(path)
		if err == nil && c == code {
			return
		}
		last = fmt.Errorf("code %d err %v", c, err)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never answered %d: %v", path, code, last)
}

func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatal("stand-in did not exit within 10s")
		return -1
	}
}

func TestHealthyServesEveryEndpointAndRecordsFirst200(t *testing.T) {
	for comp, paths := range map[string][]string{
		"kube-apiserver":          {"/livez", "/readyz", "/healthz"},
		"kube-controller-manager": {"/healthz"},
		"kube-scheduler":          {"/livez", "/readyz", "/healthz"},
	} {
		t.Run(comp, func(t *testing.T) {
			p := start(t, comp)
			for _, path := range paths {
				p.waitCode(t, path, 200)
			}
			if c, _ := p.get("/nope"); c != 404 {
				t.Errorf("/nope answered %d, want 404", c)
			}
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			if code := p.wait(t); code != 0 {
				t.Fatalf("exit code %d after SIGTERM, want 0", code)
			}
			ev, err := ReadEvents(p.events)
			if err != nil {
				t.Fatal(err)
			}
			healthy := 0
			for _, e := range ev {
				if e.Event == EventHealthy {
					healthy++
					if e.PID != p.cmd.Process.Pid || e.Component != comp {
						t.Errorf("healthy event %+v: want pid %d component %s", e, p.cmd.Process.Pid, comp)
					}
				}
			}
			if healthy != 1 {
				t.Fatalf("%d healthy events, want exactly 1 (the first 200): %+v", healthy, ev)
			}
		})
	}
}

// TestHealthyAnswerIsWhole: a healthy answer has the form kube-apiserver's
// healthz handler gives it: "ok" with its length, not chunked (which costs
// a prober one more read for the last chunk), as text/plain.
func TestHealthyAnswerIsWhole(t *testing.T) {
	p := start(t, "kube-scheduler")
	p.waitCode(t, "/livez", 200)
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/livez", p.port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != "ok" || resp.ContentLength != 2 || len(resp.TransferEncoding) != 0 {
		t.Errorf("answer %q, Content-Length %d, Transfer-Encoding %v; want \"ok\", 2, none", body, resp.ContentLength, resp.TransferEncoding)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
		t.Errorf("Content-Type %q, want text/plain; charset=utf-8", ct)
	}
}

func TestModes(t *testing.T) {
	t.Run("exit-at-start", func(t *testing.T) {
		p := start(t, "kube-scheduler", EnvMode+"=exit-at-start")
		if code := p.wait(t); code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
	})
	t.Run("never-listen", func(t *testing.T) {
		p := start(t, "kube-scheduler", EnvMode+"=never-listen")
		time.Sleep(300 * time.Millisecond)
		if _, err := p.get("/healthz"); err == nil {
			t.Fatal("never-listen answered")
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
	})
	t.Run("unhealthy", func(t *testing.T) {
		p := start(t, "kube-apiserver", EnvMode+"=unhealthy")
		p.waitCode(t, "/readyz", 500)
	})
	t.Run("ready-after", func(t *testing.T) {
		p := start(t, "kube-scheduler", EnvReadyAfter+"=300ms")
		p.waitCode(t, "/healthz", 500)
		p.waitCode(t, "/healthz", 200)
	})
	t.Run("crash-after", func(t *testing.T) {
		p := start(t, "kube-controller-manager", EnvMode+"=crash-after", EnvCrashAfter+"=300ms")
		p.waitCode(t, "/healthz", 200)
		if code := p.wait(t); code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
	})
	t.Run("ignore-sigterm", func(t *testing.T) {
		p := start(t, "kube-scheduler", EnvMode+"=ignore-sigterm")
		p.waitCode(t, "/healthz", 200)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		time.Sleep(300 * time.Millisecond)
		p.waitCode(t, "/healthz", 200) // still serving
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		p.wait(t)
	})
	t.Run("kube-vip runs without a listener until SIGTERM", func(t *testing.T) {
		p := start(t, "kube-vip")
		time.Sleep(200 * time.Millisecond)
		if _, err := p.get("/healthz"); err == nil {
			t.Fatal("kube-vip answered on its port")
		}
		select {
		case <-p.done:
			t.Fatal("kube-vip exited by itself")
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
	})
}

func TestParse(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	o, err := Parse([]string{"/usr/local/bin/kube-apiserver", "--secure-port", "7443", "--advertise-address=10.0.0.1", "--etcd-servers=https://127.0.0.1:2379"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.Component != "kube-apiserver" || o.Addr != "127.0.0.1:7443" || o.Mode != ModeHealthy {
		t.Fatalf("got %+v", o)
	}
	o, err = Parse([]string{"x", "--bind-address=0.0.0.0"}, env(map[string]string{EnvComponent: "kube-scheduler"}))
	if err != nil || o.Addr != "127.0.0.1:10259" {
		t.Fatalf("got %+v %v, want kube-scheduler on 127.0.0.1:10259", o, err)
	}
	for name, args := range map[string][]string{
		"unknown component": {"etcd"},
		"bad port":          {"kube-scheduler", "--secure-port=x"},
		"routable bind":     {"kube-scheduler", "--bind-address=10.1.2.3"},
	} {
		if _, err := Parse(args, env(nil)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Parse([]string{"kube-scheduler"}, env(map[string]string{EnvMode: "bogus"})); err == nil {
		t.Error("bogus mode: no error")
	}
}
