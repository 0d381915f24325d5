package kubeletrules

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

// fileSource starts kubelet's file source on path for node cp-1, wired to
// a pod config as this minor's kubelet wires them, and returns the pod
// config's updates, and stop, which undoes what the wiring set (nothing,
// in this minor); the source logs what it cannot read to logger. It stops
// with ctx.
func fileSource(ctx context.Context, logger logr.Logger, path string) (updates <-chan kubetypes.PodUpdate, stop func()) {
	cfg := config.NewPodConfig(config.PodConfigNotificationIncremental, &record.FakeRecorder{}, kubeletutil.NewPodStartupLatencyTracker())
	config.NewSourceFile(logger, path, types.NodeName("cp-1"), time.Hour, cfg.Channel(ctx, kubetypes.FileSource))
	return cfg.Updates(), func() {}
}
