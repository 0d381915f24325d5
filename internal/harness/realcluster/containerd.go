package realcluster

// A node's containerd: its own root and config under the node's
// directory, its state and socket at containerd's defaults under
// /run/containerd (bound per node), and the cluster's registry hosts.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// containerdConfig is the recipe's (/work/shared/specs/real-kubelet,
// e2e/containerd.go): restrict_oom_score_adj because these machines lack
// CAP_SYS_RESOURCE; cgroupfs; registry hosts from config_path, where the
// cluster points registry.k8s.io at its own registry.
const containerdConfig = `version = 2
root = "{{dir}}/containerd/root"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{pause}}"
  enable_cdi = false
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{dir}}/cni/bin"
    conf_dir = "{{dir}}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{{hosts}}"
`

// startContainerd writes the node's containerd config and starts it,
// waiting until it answers on its socket.
func (n *Node) startContainerd(ctx context.Context, pause, hostsDir string) error {
	for _, d := range []string{"containerd/root", "cni/bin", "cni/net.d"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return fmt.Errorf("real cluster: %w", err)
		}
	}
	if err := n.writeCNI(); err != nil {
		return err
	}
	cfg := filepath.Join(n.Dir, "containerd.toml")
	text := strings.NewReplacer("{{dir}}", n.Dir, "{{pause}}", pause, "{{hosts}}", hostsDir).Replace(containerdConfig)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	if err := n.Start("containerd", "containerd", "--config", cfg); err != nil {
		return err
	}
	return waitFor(ctx, "node "+n.Name+"'s containerd to answer", 30*time.Second, func() (bool, error) {
		if !n.Alive("containerd") {
			return false, fmt.Errorf("containerd exited: %s", tail(n.Log("containerd"), 20))
		}
		return n.ctrAnswers(ctx), nil
	})
}

// CNIPluginDir is where Debian's containernetworking-plugins installs the
// reference plugins (bridge, host-local, loopback).
const CNIPluginDir = "/usr/lib/cni"

// writeCNI gives the node's containerd a pod network: a bridge in the
// node's network namespace with addresses from 10.244.<N>.0/24, so that
// kubelet reports the runtime's network ready (the Node becomes Ready) and
// a pod off the host network runs (kubeadm upgrade's health-check Job).
// libcni's cache and host-local's leases are under /var/lib/cni, bound per
// node; the pods' network namespaces under containerd's state directory.
func (n *Node) writeCNI() error {
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		link := filepath.Join(n.Dir, "cni/bin", p)
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(CNIPluginDir, p), link); err != nil {
			return fmt.Errorf("real cluster: %w", err)
		}
	}
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "stratum-rc", "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.%d.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
`, n.Index)
	if err := os.WriteFile(filepath.Join(n.Dir, "cni/net.d/10-stratum-rc.conflist"), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	return nil
}

// ctrAnswers reports whether the node's containerd answers ctr version.
func (n *Node) ctrAnswers(ctx context.Context) bool {
	return exec.CommandContext(ctx, "ctr", "-a", n.ContainerdSock, "version").Run() == nil
}

// Ctr runs ctr against the node's containerd in the k8s.io namespace.
func (n *Node) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, "ctr", append([]string{"-a", n.ContainerdSock, "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// waitFor polls cond every 100 ms until it holds, fails, ctx ends or
// timeout passes; the error names what it waited for.
func waitFor(ctx context.Context, what string, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("real cluster: waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("real cluster: timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("real cluster: waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
