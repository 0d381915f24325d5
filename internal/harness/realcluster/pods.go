package realcluster

// The control-plane pods as the API server sees them: kubelet's mirror
// pods of the static pods kubeadm wrote.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// StaticComponents are the static pods kubeadm writes on every
// control-plane node.
var StaticComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// adminClient is an HTTP client with admin.conf's credentials, each
// request bounded by timeout (0: none), and admin.conf's server (the load
// balancer).
func (c *Cluster) adminClient(timeout time.Duration) (*http.Client, string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.AdminConf())
	if err != nil {
		return nil, "", fmt.Errorf("real cluster: admin kubeconfig: %w", err)
	}
	cfg.Timeout = timeout
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("real cluster: admin client: %w", err)
	}
	return hc, cfg.Host, nil
}

// Pods lists kube-system's pods through the load balancer, as admin.
func (c *Cluster) Pods(ctx context.Context) ([]corev1.Pod, error) {
	hc, host, err := c.adminClient(0)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/api/v1/namespaces/kube-system/pods", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("real cluster: list pods: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("real cluster: list pods: %s", resp.Status)
	}
	var l corev1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, fmt.Errorf("real cluster: list pods: %w", err)
	}
	return l.Items, nil
}

// MirrorPodsRunning is nil when every node has a mirror pod of each of
// StaticComponents ("<component>-<node>") in phase Running, and otherwise
// names the first that is missing or not running.
func (c *Cluster) MirrorPodsRunning(ctx context.Context) error {
	pods, err := c.Pods(ctx)
	if err != nil {
		return err
	}
	byName := map[string]corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	for _, n := range c.Nodes {
		for _, comp := range StaticComponents {
			p, ok := byName[comp+"-"+n.Name]
			switch {
			case !ok:
				return fmt.Errorf("no mirror pod %s-%s", comp, n.Name)
			case p.Annotations["kubernetes.io/config.mirror"] == "":
				return fmt.Errorf("pod %s is not a mirror pod", p.Name)
			case p.Status.Phase != corev1.PodRunning:
				return fmt.Errorf("mirror pod %s is %s", p.Name, p.Status.Phase)
			}
		}
	}
	return nil
}
