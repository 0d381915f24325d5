package e2e

// This file holds what TestReleaseStrategies replaces and watches: the
// stand-in scheduler's manifest, its durable removal and write, and the
// watcher that timestamps the old pod's exit, its cgroup's removal, the new
// process and its first health answer.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/proc"
)

// benchPod is kubeadm's kube-scheduler manifest as stratum-upgrade renders
// it (manifest/testdata/golden/default/kube-scheduler.yaml): one hostPath
// volume, the probes, a CPU request (burstable QoS), with the stand-in's
// image, a free port and a per-round annotation, so every round's pod has
// a new content hash and therefore a new UID, as an upgrade's does.
const benchPod = `apiVersion: v1
kind: Pod
metadata:
  annotations:
    stratum.bench/round: "{{round}}"
  labels:
    component: kube-scheduler
    tier: control-plane
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --bind-address=127.0.0.1
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --secure-port={{port}}
    image: {{image}}
    imagePullPolicy: Never
    livenessProbe:
      failureThreshold: 8
      httpGet: {host: 127.0.0.1, path: /healthz, port: {{port}}, scheme: HTTPS}
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    name: kube-scheduler
    resources:
      requests:
        cpu: 100m
    startupProbe:
      failureThreshold: 24
      httpGet: {host: 127.0.0.1, path: /healthz, port: {{port}}, scheme: HTTPS}
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    volumeMounts:
    - {mountPath: /etc/kubernetes/scheduler.conf, name: kubeconfig, readOnly: true}
  dnsPolicy: ClusterFirst
  hostNetwork: true
  priorityClassName: system-node-critical
  restartPolicy: Always
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  terminationGracePeriodSeconds: 30
  volumes:
  - hostPath: {path: {{kubeconfig}}, type: FileOrCreate}
    name: kubeconfig
`

// benchBinary is the process the benchmark's pod runs.
const benchBinary = nodestate.Scheduler

// benchManifest is benchPod for round on port.
func benchManifest(h *Host, port, round int) []byte {
	return []byte(strings.NewReplacer("{{round}}", fmt.Sprint(round), "{{port}}", fmt.Sprint(port),
		"{{image}}", testbed.ModeImage(nodestate.Scheduler, "v1.34.4", ""),
		"{{kubeconfig}}", filepath.Join(h.Root, "scheduler.conf")).Replace(benchPod))
}

// writeDurable writes b to path as the engine does: a hidden temporary
// file in the same directory (kubelet ignores dot files), fsynced, renamed
// over path, the directory fsynced. It returns the time of the rename, the
// moment kubelet can see the new content.
func writeDurable(path string, b []byte) (time.Time, error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return time.Time{}, err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return time.Time{}, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return time.Time{}, err
	}
	if err := f.Close(); err != nil {
		return time.Time{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	return at, syncDir(filepath.Dir(path))
}

// removeDurable removes path and fsyncs its directory; it returns the time
// the removal was durable.
func removeDurable(path string) (time.Time, error) {
	if err := os.Remove(path); err != nil {
		return time.Time{}, err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// watchPoll is how often the watcher looks. Its cost (a stat per cgroup
// directory and per old PID; a scan of the host's shims once the new
// manifest is written) is small next to what it measures.
const watchPoll = 10 * time.Millisecond

// watcher timestamps, from the removal (or in-place write) on, what
// happens to one replacement: each channel is closed once its moment is
// recorded, so the strategy can wait on it.
type watcher struct {
	gone, cg, started, active chan struct{}
	// the moments, each valid once its channel is closed
	tGone, tCg, tNew, tActive time.Time
	written                   atomic.Bool // the new manifest is in place: look for its process
	stop                      context.CancelFunc
	wg                        sync.WaitGroup
	err                       error // valid after wait
}

// watch starts a watcher of the pod whose processes are old and whose pod
// cgroup directories are dirs; the new process must answer on health.
func watch(h *Host, old []proc.Process, dirs []string, health string) *watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{gone: make(chan struct{}), cg: make(chan struct{}), started: make(chan struct{}), active: make(chan struct{}), stop: cancel}
	client := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}} //nolint:gosec // a loopback stand-in's self-signed certificate
	oldPIDs := make([]int, len(old))
	for i, p := range old {
		oldPIDs[i] = p.PID
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(watchPoll)
		defer tick.Stop()
		for {
			if w.tGone.IsZero() && allGone(old) {
				w.tGone = time.Now()
				close(w.gone)
			}
			if w.tCg.IsZero() {
				if ok, err := proc.CgroupsGone(dirs); err != nil {
					w.err = err
					return
				} else if ok {
					w.tCg = time.Now()
					close(w.cg)
				}
			}
			if w.tNew.IsZero() && w.written.Load() {
				ps, err := h.ComponentPIDs(benchBinary)
				if err == nil && slices.ContainsFunc(ps, func(p proc.Process) bool { return !slices.Contains(oldPIDs, p.PID) }) {
					w.tNew = time.Now()
					close(w.started)
				}
			}
			if !w.tNew.IsZero() && !w.tGone.IsZero() && answers(client, health) {
				w.tActive = time.Now()
				close(w.active)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// wait ends the watcher once the new process answers, at most timeout,
// and reports what it did not see.
func (w *watcher) wait(timeout time.Duration) error {
	select {
	case <-w.active:
	case <-time.After(timeout):
	}
	w.stop()
	w.wg.Wait()
	if w.err != nil {
		return w.err
	}
	if w.tActive.IsZero() {
		return fmt.Errorf("within %s: old process gone %v, pod cgroup gone %v, new process %v, answering %v",
			timeout, !w.tGone.IsZero(), !w.tCg.IsZero(), !w.tNew.IsZero(), false)
	}
	return nil
}

// allGone reports whether none of ps runs (exited, a zombie, or its PID
// reused by a process started later); unknown is not gone.
func allGone(ps []proc.Process) bool {
	for _, p := range ps {
		ticks, alive, err := proc.StartTicks(p.PID)
		if err != nil || alive && ticks == p.StartTicks {
			return false
		}
	}
	return true
}

func answers(c *http.Client, url string) bool {
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
