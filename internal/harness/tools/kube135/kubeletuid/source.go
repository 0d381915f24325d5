package main

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
)

// fileSource starts kubelet's file source on path (a file or a directory)
// for node, wired to a pod config as this minor's kubelet wires them
// (pkg/kubelet/kubelet.go, makePodSourceConfig), and returns the pod
// config's updates; the source logs what it cannot read to logger. It
// stops with ctx.
//
// This minor's kubelet names a static pod by the FNV-128a (hash/fnv) hash
// of the decoded, defaulted pod, then "host:<node>" and "file:<path>"
// (pkg/kubelet/config/common.go, applyDefaults).
func fileSource(ctx context.Context, logger logr.Logger, path, node string) <-chan kubetypes.PodUpdate {
	cfg := config.NewPodConfig(config.PodConfigNotificationIncremental, &record.FakeRecorder{}, kubeletutil.NewPodStartupLatencyTracker())
	// The period only paces the source's later relistings: the first
	// listing is immediate, and this program is gone long before a second.
	config.NewSourceFile(logger, path, types.NodeName(node), time.Hour, cfg.Channel(ctx, kubetypes.FileSource))
	return cfg.Updates()
}
