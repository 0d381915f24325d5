package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
)

// startHost builds kubelet k and the images and starts a Host whose
// teardown is registered with t.Cleanup and must be clean.
func startHost(t *testing.T, k Kubelet) *Host {
	t.Helper()
	return startHostWith(t, k, HostOptions{})
}

// startHostWith is startHost with o's options (its Images, Kubelet,
// KubeletVersion and Logf are set here).
func startHostWith(t *testing.T, k Kubelet, o HostOptions) *Host {
	t.Helper()
	kubelet, built, err := KubeletBinary(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet %s %s (built now: %v)", k.Version, kubelet, built)
	archive, written, err := BuildImages()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("images %s (written now: %v)", archive, written)
	if scoped() {
		if err := becomeSubreaper(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s=1: process scans scoped to this test's tree (pid %d), not host-wide", EnvScope, os.Getpid())
	}
	o.Images, o.Kubelet, o.KubeletVersion, o.Logf = archive, kubelet, k.Version, t.Logf
	h, err := StartHost(t.Context(), o)
	if h != nil {
		if cache, err := CacheDir(); err == nil {
			h.SaveLogs = filepath.Join(cache, "e2e", "last-run", t.Name())
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("kubelet log (tail):\n%s", tailFile(h.KubeletLog, 80))
				t.Logf("containerd log (tail):\n%s", tailFile(h.ContainerdLog, 30))
			}
			start := time.Now()
			if err := h.Stop(os.Getenv("STRATUM_E2E_KEEP") == "1"); err != nil {
				t.Errorf("teardown: %v", err)
			}
			t.Logf("teardown in %s", time.Since(start).Round(time.Millisecond))
			checkTornDown(t, h)
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// checkTornDown asserts nothing of the host is left: no process naming the
// root, no mount under it, no kubepods cgroup.
func checkTornDown(t *testing.T, h *Host) {
	t.Helper()
	if ps, _ := processesWith(h.Root); len(ps) > 0 {
		t.Errorf("processes left after teardown: %v", ps)
	}
	if mps, _ := mountsUnder(h.Root); len(mps) > 0 {
		t.Errorf("mounts left after teardown: %v", mps)
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(cg) > 0 {
		t.Errorf("kubepods cgroups left after teardown: %v", cg)
	}
}

const pausePod = `apiVersion: v1
kind: Pod
metadata:
  name: pause
  namespace: kube-system
spec:
  hostNetwork: true
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10
    imagePullPolicy: Never
  - name: bare
    image: registry.k8s.io/e2e-env-probe:1
    imagePullPolicy: Never
    env:
    - {name: FOO, value: bar}
  - name: override
    image: registry.k8s.io/e2e-env-probe:1-home
    imagePullPolicy: Never
    env:
    - {name: HOSTNAME, value: from-pod}
    - {name: PATH, value: /from-pod}
`

// TestHostRunsStaticPod: containerd and each kubelet of the run come up,
// a static pod of the pause image runs as a host process under a shim, and
// its removal and the teardown leave nothing behind.
func TestHostRunsStaticPod(t *testing.T) {
	requireE2E(t)
	ks, _, err := kubeletsFor()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		t.Run(k.Version, func(t *testing.T) { hostRunsStaticPod(t, k) })
	}
}

func hostRunsStaticPod(t *testing.T, k Kubelet) {
	h := startHost(t, k)
	imgs, err := h.Images(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(imgs, " "), SandboxImage) {
		t.Fatalf("images after import: %v", imgs)
	}
	start := time.Now()
	if err := os.WriteFile(filepath.Join(h.ManifestDir, "pause.yaml"), []byte(pausePod), 0o644); err != nil {
		t.Fatal(err)
	}
	err = waitUntil(t.Context(), "the pause pod running", 60*time.Second, func() (bool, error) {
		ps, err := h.ComponentPIDs("pause")
		// the sandbox's pause and the containers'
		return err == nil && len(ps) >= 4, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("static pod running %s after its manifest appeared", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	pods, err := h.Pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet /pods: %+v", pods)
	checkRuntimeEnv(t, h)
}

// checkRuntimeEnv asserts what the container runtime adds to a container's
// environment, the rule kubeletsim's runtimeEnv models: PATH (the default),
// HOSTNAME (the host's, for a hostNetwork pod) and HOME=/, each only when
// neither the image nor the pod sets it.
func checkRuntimeEnv(t *testing.T, h *Host) {
	t.Helper()
	host, _ := os.Hostname()
	want := map[string][]string{
		// the container of the image with no ENV, pod env FOO=bar
		"FOO=bar": {"FOO=bar", "HOME=/", "HOSTNAME=" + host, "PATH=" + kubeletsim.DefaultPath},
		// image ENV HOME, pod env HOSTNAME and PATH
		"HOME=/from-image": {"HOME=/from-image", "HOSTNAME=from-pod", "PATH=/from-pod"},
	}
	ps, err := h.ComponentPIDs("pause")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, p := range ps {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.PID))
		env := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		sort.Strings(env)
		t.Logf("pid %d environment: %q", p.PID, env)
		for marker, w := range want {
			if slices.Contains(env, marker) {
				found++
				if !slices.Equal(env, w) {
					t.Errorf("container environment %q, want %q", env, w)
				}
			}
		}
	}
	if found != len(want) {
		t.Errorf("found %d of the %d probe containers", found, len(want))
	}
}
