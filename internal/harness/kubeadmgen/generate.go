package kubeadmgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

// ManifestDir is where kubeadm writes the static pods, and kubelet's
// staticPodPath on a kubeadm node: the path that goes into the UIDs.
const ManifestDir = "/etc/kubernetes/manifests"

// Manifests are the files kubeadm writes for a control-plane node with
// stacked etcd.
var Manifests = []string{"etcd.yaml", "kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml"}

// RunTimeout bounds each run of kubeadm, kubeadmetcd or kubeletuid (they
// take well under a second).
const RunTimeout = time.Minute

// Generate writes the static pod manifests kubeadm of version writes for
// configuration name into dir (created if missing), exactly as kubeadm
// wrote them, building version's kubeadm first if the cache lacks it. It
// runs as root only: kubeadm's --rootfs chroots. Nothing but Manifests is
// written to dir.
func Generate(ctx context.Context, version, name, dir string) error {
	c, err := Lookup(name)
	if err != nil {
		return err
	}
	file, err := c.File(version)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("kubeadm --rootfs chroots: generating kubeadm's manifests needs root")
	}
	bins, err := kubebuild.KubeadmBinaries(ctx, version)
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "kubeadmgen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	for _, d := range c.HostDirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := writeRootFiles(c, root); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "kubeadm.yaml"), file, 0o600); err != nil {
		return err
	}
	// Inside the chroot the file is /kubeadm.yaml.
	if err := run(ctx, bins["kubeadm"], "init", "phase", "control-plane", "all", "--config", "/kubeadm.yaml", "--rootfs", root); err != nil {
		return fmt.Errorf("kubeadm %s, configuration %s: %w", version, name, err)
	}
	written := filepath.Join(root, ManifestDir)
	if len(c.Members) == 0 {
		err = run(ctx, bins["kubeadm"], "init", "phase", "etcd", "local", "--config", "/kubeadm.yaml", "--rootfs", root)
	} else {
		args := []string{"-config", filepath.Join(root, "kubeadm.yaml"), "-out", written}
		for _, m := range c.Members {
			args = append(args, "-member", m)
		}
		err = run(ctx, bins["kubeadmetcd"], args...)
	}
	if err != nil {
		return fmt.Errorf("kubeadm %s, configuration %s: %w", version, name, err)
	}
	entries, err := os.ReadDir(written)
	if err != nil {
		return fmt.Errorf("kubeadm %s, configuration %s: %w", version, name, err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, Manifests) {
		return fmt.Errorf("kubeadm %s, configuration %s wrote %v, want %v", version, name, got, Manifests)
	}
	etcd, err := os.ReadFile(filepath.Join(written, "etcd.yaml"))
	if err != nil {
		return err
	}
	if !bytes.Contains(etcd, []byte("- --name="+c.NodeName+"\n")) {
		return fmt.Errorf("configuration %s: kubeadm's etcd is not named %s: configs/%s.yaml and Config.NodeName disagree", name, c.NodeName, name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, m := range Manifests {
		b, err := os.ReadFile(filepath.Join(written, m))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, m), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeRootFiles writes c.RootFiles under dir.
func writeRootFiles(c Config, dir string) error {
	files, err := c.RootFiles()
	if err != nil {
		return err
	}
	for p, b := range files {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// PodUID is kubeletuid's entry for one manifest file.
type PodUID struct {
	// Name is the pod's name as kubelet names it (<name>-<node>).
	Name string `json:"name"`
	// UID is the UID kubelet of that version computes for the file.
	UID string `json:"uid"`
}

// KubeletUIDs are the pod UIDs kubelet of version computes for the
// manifests of dir (file name -> pod) on node, with dir's files at
// ManifestDir (the path is part of the UID), and the JSON kubeletuid
// printed them as. It runs as root only: kubeletuid chroots to read the
// files at that path.
func KubeletUIDs(ctx context.Context, version, dir, node string) (map[string]PodUID, []byte, error) {
	bins, err := kubebuild.KubeadmBinaries(ctx, version)
	if err != nil {
		return nil, nil, err
	}
	out, err := output(ctx, bins["kubeletuid"], "-node", node, "-as", ManifestDir, dir)
	if err != nil {
		return nil, nil, err
	}
	var pods map[string]PodUID
	if err := json.Unmarshal(out, &pods); err != nil {
		return nil, nil, fmt.Errorf("kubeletuid's output: %w\n%s", err, out)
	}
	return pods, out, nil
}

// run runs a program to completion within RunTimeout.
func run(ctx context.Context, prog string, args ...string) error {
	_, err := output(ctx, prog, args...)
	return err
}

// output is a program's standard output; its standard error goes into
// the error when it fails or outlives RunTimeout.
func output(ctx context.Context, prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("%s %s: no exit within %s\n%s", filepath.Base(prog), strings.Join(args, " "), RunTimeout, stderr.Bytes())
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(prog), strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}
