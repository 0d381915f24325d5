package realcluster

// A node's kubelet, started the way kubeadm's systemd drop-in
// (10-kubeadm.conf) starts it: once kubeadm's kubelet-start phase has
// written /var/lib/kubelet/config.yaml and kubeadm-flags.env, with the
// bootstrap and the node kubeconfig and kubeadm's flags. kubeadm's own
// attempt to (re)start the kubelet through systemctl fails here (PID 1 is
// not systemd), which kubeadm only warns about.

import (
	"context"
	"os"
	"strings"
	"time"
)

// kubeletFlags are kubeadm's KUBELET_KUBEADM_ARGS from the node's
// /var/lib/kubelet/kubeadm-flags.env, or nil while it is not written.
func (n *Node) kubeletFlags() []string {
	b, err := os.ReadFile(n.HostPath("/var/lib/kubelet/kubeadm-flags.env"))
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "KUBELET_KUBEADM_ARGS="); ok {
			return strings.Fields(strings.Trim(v, `"`))
		}
	}
	return nil
}

// StartKubeletWhenConfigured waits (in the background) until kubeadm has
// written the kubelet's configuration and flags, then starts the kubelet
// binary with them; a failure to start is reported on the returned
// channel, which is closed once the kubelet runs or ctx ends.
func (n *Node) StartKubeletWhenConfigured(ctx context.Context, kubelet string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		cfg := n.HostPath("/var/lib/kubelet/config.yaml")
		for {
			_, err := os.Stat(cfg)
			if flags := n.kubeletFlags(); err == nil && flags != nil {
				// kubeadm writes the two files one after the other.
				time.Sleep(200 * time.Millisecond)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		argv := append([]string{kubelet,
			"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
			"--kubeconfig=/etc/kubernetes/kubelet.conf",
			"--config=/var/lib/kubelet/config.yaml"}, n.kubeletFlags()...)
		n.logf("%s: kubeadm configured the kubelet: starting %s", n.Name, strings.Join(argv, " "))
		if err := n.Start("kubelet", argv...); err != nil {
			errc <- err
		}
	}()
	return errc
}
