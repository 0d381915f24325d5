package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKubeletBinary builds kubelet (or finds it in the cache), runs it, and
// checks that a second call is served from the cache.
func TestKubeletBinary(t *testing.T) {
	requireE2E(t)
	start := time.Now()
	path, built, err := KubeletBinary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet %s (built now: %v) in %s", path, built, time.Since(start).Round(time.Second))
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Kubernetes "+KubeletVersion) {
		t.Fatalf("%s --version: %q %v", path, out, err)
	}
	again, builtAgain, err := KubeletBinary(t.Context())
	if err != nil || again != path || builtAgain {
		t.Fatalf("second call: %s built=%v %v; want the cached %s", again, builtAgain, err, path)
	}
}

func TestIsStatic(t *testing.T) {
	static, err := IsStatic("/bin/sh")
	if err != nil {
		t.Skip(err)
	}
	if static {
		t.Error("/bin/sh reported static")
	}
}
