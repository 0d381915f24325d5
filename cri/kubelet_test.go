package cri

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/proc"
)

// envSleep makes the test binary a stand-in process that only sleeps: run
// under argv[0] ".../kubelet" with kubelet's flags, it is a kubelet as the
// process table shows one.
const envSleep = "STRATUM_CRI_TEST_SLEEP"

func TestMain(m *testing.M) {
	if os.Getenv(envSleep) == "1" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startKubelet runs a process whose argv is "<dir>/kubelet args...", in
// dir, until the test ends.
func startKubelet(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Args = append([]string{filepath.Join(dir, "kubelet")}, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envSleep+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// The running kubelet's own flags name the runtime: its
// --container-runtime-endpoint, else its --config file's field (a relative
// path taken from its working directory); kubelets that disagree name none.
func TestResolveRunningKubelet(t *testing.T) {
	ps := proc.Host().Within(os.Getpid())
	if _, ok, note, err := fromRunningKubelet(ps); err != nil || ok || note != "no kubelet process runs" {
		t.Fatalf("no kubelet: %v %v %q", ok, err, note)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("kind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/from-config.sock\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startKubelet(t, dir, "--v=2", "--config", "config.yaml")
	var src Source
	if err := waitFor(func() bool {
		s, err := Resolve("", ps, "")
		src = s
		return err == nil
	}); err != nil || src.Endpoint != "unix:///run/from-config.sock" || !strings.Contains(src.From, cfg) {
		t.Fatalf("kubelet --config: %+v, %v; want its config file's endpoint", src, err)
	}
	// The explicit flag still wins.
	if s, _ := Resolve("/run/x.sock", ps, ""); s.Endpoint != "unix:///run/x.sock" {
		t.Fatalf("--cri-socket with a kubelet running: %+v", s)
	}
	startKubelet(t, dir, "--container-runtime-endpoint=unix:///run/flag.sock", "--config=config.yaml")
	if err := waitFor(func() bool {
		_, ok, note, _ := fromRunningKubelet(ps)
		return !ok && strings.Contains(note, "2 kubelet processes name different") && strings.Contains(note, "unix:///run/flag.sock")
	}); err != nil {
		t.Fatal("two kubelets naming different endpoints were not refused as a source")
	}
}

// waitFor polls cond for up to 5 s (a started process takes a moment to
// show its argv).
func waitFor(cond func() bool) error {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return os.ErrDeadlineExceeded
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
