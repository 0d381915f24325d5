package testbed

// This file runs the kubelet stand-in process and builds the stand-in binaries.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
)

func (n *Node) startKubelet(bin string, opts Options) error {
	n.kubeletBin, n.kubeletOpts = bin, opts // for Reboot
	d := func(v, def time.Duration) string {
		if opts.KubeletTimings {
			return "0"
		}
		if v == 0 {
			v = def
		}
		return v.String()
	}
	// A node in a network namespace of its own (Options.NetNSNode) gets no
	// cgroup parent: `ip netns exec` mounts a sysfs of its own, without the
	// cgroup filesystem, so its stand-in could make no pod cgroup and would
	// start no container. Its processes are identified by name within its
	// --proc-scope, as on a machine without kubelet's cgroups.
	if n.CgroupParent == "" && n.cmd == nil && n.netns == nil {
		n.CgroupParent = n.makeCgroupParent()
	}
	args := []string{
		"--cgroup-parent=" + n.CgroupParent,
		"--manifest-dir=" + n.ManifestDir,
		"--root-dir=" + n.KubeletDir,
		"--node-name=" + n.State.NodeName,
		"--node-ip=" + n.State.AdvertiseAddress,
		"--image-map=" + n.ImageMapFile,
		"--relist=" + d(opts.Relist, time.Second),
		"--start-delay=" + d(opts.StartDelay, 100*time.Millisecond),
		"--start-latency=" + opts.StartLatency.String(), // 0 unless set, KubeletTimings or not
		"--grace-floor=" + d(opts.GraceFloor, 200*time.Millisecond),
		"--grace-cap=" + d(opts.GraceCap, 5*time.Second),
		"--backoff-base=" + d(opts.BackoffBase, 500*time.Millisecond),
		"--backoff-cap=" + d(opts.BackoffCap, 5*time.Second),
		"--housekeeping=" + d(opts.Housekeeping, 100*time.Millisecond),
	}
	logf, err := os.OpenFile(n.KubeletLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	defer logf.Close()
	cmd := n.Command(bin, args...)
	cmd.Env = []string{MarkerEnv + "=" + n.Root, "PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = n.Root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := kubeletsim.Spawn(cmd); err != nil {
		return fmt.Errorf("testbed: start kubelet stand-in: %w", err)
	}
	n.cmd, n.KubeletPID, n.exited = cmd, cmd.Process.Pid, make(chan struct{})
	go func() { _ = cmd.Wait(); close(n.exited) }()
	c, err := kubeletsim.NewClient(n.KubeletDir, 30*time.Second)
	if err != nil {
		return err
	}
	if n.netns != nil {
		// Its status endpoint is on the namespace's loopback.
		c.HTTP.Transport = &http.Transport{DialContext: n.netns.dial, Proxy: nil}
	}
	n.Kubelet = c
	return nil
}

func tail(b []byte, lines int) string {
	s := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(s) > lines {
		s = s[len(s)-lines:]
	}
	return strings.Join(s, "\n")
}

// binaries are the stand-in programs, built once per process.
type binaries struct{ kubelet, component string }

var standinBinaries = sync.OnceValues(func() (*binaries, error) {
	repo, err := build.RepoRoot()
	if err != nil {
		return nil, err
	}
	cache, err := build.CacheDir()
	if err != nil {
		return nil, err
	}
	// One directory per checkout: the cache is shared by every checkout
	// on the machine, and another one's stand-in may lack a flag this
	// one passes.
	sum := sha256.Sum256([]byte(repo))
	dir := filepath.Join(cache, "standin", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	b := &binaries{kubelet: filepath.Join(dir, "kubelet-standin"), component: filepath.Join(dir, "component-standin")}
	for pkg, out := range map[string]string{"./internal/harness/cmd/kubelet-standin": b.kubelet, "./internal/harness/cmd/component-standin": b.component} {
		// Built to a private name and renamed: a process of another test
		// binary may be running the previous build.
		tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, pkg)
		cmd.Dir = repo
		outb, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("testbed: go build %s: %w\n%s", pkg, err, outb)
		}
		if err := os.Rename(tmp, out); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
	}
	return b, nil
})
