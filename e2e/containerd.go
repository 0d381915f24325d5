package e2e

// This file holds the Host's containerd: its configuration, start, ctr, image import and listing, and tasks.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const containerdConfig = `version = 2
root = "{{root}}/containerd/root"
state = "{{root}}/containerd/state"

[grpc]
  address = "{{sock}}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{pause}}"
  enable_cdi = false
  # no CAP_SYS_RESOURCE on these machines: a negative oom_score_adj
  # (the sandbox default -998) cannot be set
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{root}}/cni/bin"
    conf_dir = "{{root}}/cni/net.d"
  # registry hosts (hosts.toml) per registry name: the loopback registry
  # of e2e/registry.go
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{{root}}/containerd/certs.d"
`

func (h *Host) startContainerd(ctx context.Context) error {
	cfg := filepath.Join(h.Root, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(h.expand(containerdConfig)), 0o644); err != nil {
		return fmt.Errorf("e2e host: %w", err)
	}
	start := time.Now()
	d, err := h.spawn("containerd", h.ContainerdLog, "containerd", "--config", cfg)
	if err != nil {
		return err
	}
	h.containerd = d
	err = waitUntil(ctx, "containerd to answer on "+h.ContainerdSock, 30*time.Second, func() (bool, error) {
		if !d.alive() {
			return false, fmt.Errorf("containerd exited: %s", tailFile(h.ContainerdLog, 20))
		}
		_, err := h.ctr(ctx, "version")
		return err == nil, nil
	})
	if err != nil {
		return err
	}
	h.logf("containerd pid %d up in %s", d.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	return nil
}

// ctr runs ctr against the Host's containerd in the k8s.io namespace.
func (h *Host) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ctr", append([]string{"-a", h.ContainerdSock, "-n", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Import imports a docker-archive into containerd's k8s.io namespace
// (unpacked for the overlayfs snapshotter, so kubelet finds every image
// present).
func (h *Host) Import(ctx context.Context, archive string) error {
	start := time.Now()
	if _, err := h.ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("import images: %w", err)
	}
	h.logf("images imported in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// Images lists the image references containerd holds.
func (h *Host) Images(ctx context.Context) ([]string, error) {
	out, err := h.ctr(ctx, "images", "ls", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// Tasks lists the running containerd tasks (containers and sandboxes).
func (h *Host) Tasks(ctx context.Context) ([]string, error) {
	out, err := h.ctr(ctx, "tasks", "ls", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
