// Command kubelet-standin runs the static pods of one manifest directory as
// host processes, following a real kubelet's file-source and pod-worker
// rules (package internal/harness/kubeletsim). It stops on SIGTERM or SIGINT after
// killing every pod. Durations are Go durations; zero keeps kubelet's value.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
)

func main() {
	var cfg kubeletsim.Config
	var debug bool
	fs := flag.NewFlagSet("kubelet-standin", flag.ExitOnError)
	fs.StringVar(&cfg.ManifestDir, "manifest-dir", "", "static pod directory (staticPodPath), absolute")
	fs.StringVar(&cfg.RootDir, "root-dir", "", "the stand-in's own directory (logs, status.addr), absolute")
	fs.StringVar(&cfg.NodeName, "node-name", "", "node name: pod name suffix and part of the pod UID")
	fs.StringVar(&cfg.CgroupParent, "cgroup-parent", "", "cgroup v2 directory to run each pod's containers in, as kubelet's cgroupfs driver names them (default: the stand-in's own cgroup)")
	fs.StringVar(&cfg.NodeIP, "node-ip", "", "what status.hostIP fieldRefs resolve to (default 127.0.0.1)")
	fs.StringVar(&cfg.ImageMapFile, "image-map", "", "image map file: image reference -> {binary, env, entrypoint}")
	fs.StringVar(&cfg.StatusAddr, "status-addr", "", "status endpoint host:port (default 127.0.0.1:0)")
	fs.DurationVar(&cfg.RelistInterval, "relist", 0, "full relist interval (kubelet: 20s)")
	fs.DurationVar(&cfg.StartDelay, "start-delay", 0, "pod-worker backoff before a held-back pod is checked again (kubelet: 10s)")
	fs.DurationVar(&cfg.StartLatency, "start-latency", 0, "from a pod's start being decided to its processes starting (kubelet: about 0.47s; default 0: at once)")
	fs.Float64Var(&cfg.StartJitter, "start-jitter", 0, "jitter fraction added to start-delay (kubelet: 0.5; negative: none)")
	fs.DurationVar(&cfg.GraceFloor, "grace-floor", 0, "least kill grace period (kubelet: 2s)")
	fs.DurationVar(&cfg.GraceCap, "grace-cap", 0, "most kill grace period (0: the pod's own)")
	fs.DurationVar(&cfg.BackoffBase, "backoff-base", 0, "CrashLoopBackOff initial delay (kubelet: 10s)")
	fs.DurationVar(&cfg.BackoffCap, "backoff-cap", 0, "CrashLoopBackOff cap (kubelet: 300s)")
	fs.DurationVar(&cfg.BackoffReset, "backoff-reset", 0, "running this long resets the backoff (kubelet: 10m)")
	fs.DurationVar(&cfg.Housekeeping, "housekeeping", 0, "how long a terminated pod holds its name (kubelet: 2s)")
	fs.BoolVar(&debug, "debug", false, "log at debug level")
	_ = fs.Parse(os.Args[1:])
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	k, err := kubeletsim.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := k.Run(ctx); err != nil {
		cfg.Logger.Error("kubelet stand-in failed", "err", err)
		os.Exit(1)
	}
}
