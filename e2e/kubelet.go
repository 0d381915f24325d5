package e2e

// This file holds the Host's kubelet: its configuration, start and kill, and its view of the pods.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# standalone: no kubeconfig, no API server; pods come only from staticPodPath
staticPodPath: {{manifests}}
fileCheckFrequency: 20s
containerRuntimeEndpoint: unix://{{sock}}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: {{root}}/pod-logs
address: 127.0.0.1
port: {{port}}
readOnlyPort: {{readonly}}
healthzBindAddress: 127.0.0.1
healthzPort: {{healthz}}
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
resolvConf: /etc/resolv.conf
# The disk is the host's, shared with everything else on it: kubelet's
# default thresholds (imagefs.available<15%, image GC from 85% use) put the
# node under disk pressure when the disk, not this node, filled up, and
# image GC then deleted the imported images, pause included, so no pod
# could start. "0%" turns a threshold off; GC would start at 100% use.
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

// StartKubelet starts kubelet (again) and waits until its healthz answers.
func (h *Host) StartKubelet(ctx context.Context) error {
	if h.kubelet != nil && h.kubelet.alive() {
		return fmt.Errorf("kubelet already runs (pid %d)", h.kubelet.cmd.Process.Pid)
	}
	cfg := filepath.Join(h.Root, "kubelet-config.yaml")
	if err := os.WriteFile(cfg, []byte(h.expand(kubeletConfig)), 0o644); err != nil {
		return fmt.Errorf("e2e host: %w", err)
	}
	verbosity := h.kubeletV
	if verbosity == 0 {
		verbosity = 2
	}
	start := time.Now()
	d, err := h.spawn("kubelet", h.KubeletLog, h.kubeletBin, "--config="+cfg, "--root-dir="+h.KubeletRoot,
		"--cert-dir="+filepath.Join(h.Root, "kubelet-certs"), "--hostname-override="+h.NodeName, fmt.Sprintf("--v=%d", verbosity))
	if err != nil {
		return err
	}
	h.kubelet = d
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", h.HealthzPort)
	err = waitUntil(ctx, "kubelet healthz "+url, 60*time.Second, func() (bool, error) {
		if !d.alive() {
			return false, fmt.Errorf("kubelet exited: %s", tailFile(h.KubeletLog, 30))
		}
		resp, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return err
	}
	h.logf("kubelet pid %d healthy in %s", d.cmd.Process.Pid, time.Since(start).Round(time.Millisecond))
	return nil
}

// KillKubelet SIGKILLs kubelet by PID and waits for it to exit; its pods
// keep running (their processes belong to containerd's shims).
func (h *Host) KillKubelet() error {
	if h.kubelet == nil || !h.kubelet.alive() {
		return errors.New("kubelet does not run")
	}
	_ = h.kubelet.cmd.Process.Kill()
	<-h.kubelet.exited
	return nil
}

// PodStatus is one pod as kubelet's read-only /pods endpoint reports it.
type PodStatus struct {
	Name  string
	UID   string
	Phase string
	// Reason and Message say why kubelet rejected a pod it never ran
	// (Reason "NodePorts" for a host port another pod holds).
	Reason, Message string
	Containers      []ContainerStatus
}

// ContainerStatus is one container of a PodStatus.
type ContainerStatus struct {
	Name         string
	Image        string
	Ready        bool
	RestartCount int
	Running      bool
}

// Pods reads kubelet's view of its pods (GET /pods on the read-only port).
func (h *Host) Pods(ctx context.Context) ([]PodStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/pods", h.ReadOnlyPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet /pods: %w", err)
	}
	defer resp.Body.Close()
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"metadata"`
			Status struct {
				Phase             string `json:"phase"`
				Reason            string `json:"reason"`
				Message           string `json:"message"`
				ContainerStatuses []struct {
					Name         string `json:"name"`
					Image        string `json:"image"`
					Ready        bool   `json:"ready"`
					RestartCount int    `json:"restartCount"`
					State        struct {
						Running *struct{} `json:"running"`
					} `json:"state"`
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("kubelet /pods: %w", err)
	}
	var out []PodStatus
	for _, it := range list.Items {
		p := PodStatus{Name: it.Metadata.Name, UID: it.Metadata.UID, Phase: it.Status.Phase, Reason: it.Status.Reason, Message: it.Status.Message}
		for _, c := range it.Status.ContainerStatuses {
			p.Containers = append(p.Containers, ContainerStatus{Name: c.Name, Image: c.Image, Ready: c.Ready, RestartCount: c.RestartCount, Running: c.State.Running != nil})
		}
		out = append(out, p)
	}
	return out, nil
}
