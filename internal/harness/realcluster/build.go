package realcluster

import (
	"context"
	"fmt"
	"time"

	"github.com/ciq/stratum-upgrade/e2e"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

// Version is the Kubernetes version the cluster is made with: kubeadm,
// kubelet and the control plane all at it, as kubeadm wants them.
const Version = "v1.36.3"

// Kubelet is the kubelet of Version, built in the tool module of its
// control plane (internal/harness/tools/kube136), so the packages the two
// builds share compile once.
var Kubelet = e2e.Kubelet{Version: Version, ToolDir: "internal/harness/tools/kube136"}

// Tools are the builds the cluster needs, in the order make real-cluster
// builds them: the control plane of Version (its images), its kubeadm, its
// kubelet; then the control plane of To (the upgrade's images) and its
// kubeadm (upgrade plan after the upgrade). Each is cached (build.Tool):
// nothing is rebuilt once there, and make test-real builds all but the
// kubelet too.
func Tools() ([]build.Tool, error) {
	cp, err := kubebuild.Tool(Version)
	if err != nil {
		return nil, err
	}
	adm, err := kubebuild.KubeadmTool(Version)
	if err != nil {
		return nil, err
	}
	kl, err := Kubelet.Tool()
	if err != nil {
		return nil, err
	}
	cpTo, err := kubebuild.Tool(To)
	if err != nil {
		return nil, err
	}
	admTo, err := kubebuild.KubeadmTool(To)
	if err != nil {
		return nil, err
	}
	return []build.Tool{cp, adm, kl, cpTo, admTo}, nil
}

// BuildTimes builds every Tool the cache lacks and reports each one's time
// (zero when it was cached), by the tool's name.
func BuildTimes(ctx context.Context) (map[string]time.Duration, error) {
	tools, err := Tools()
	if err != nil {
		return nil, err
	}
	out := map[string]time.Duration{}
	for _, t := range tools {
		began := time.Now()
		built, err := t.Build(ctx)
		if err != nil {
			return nil, fmt.Errorf("real cluster: %w", err)
		}
		out[t.Name] = 0
		if built {
			out[t.Name] = time.Since(began)
		}
	}
	return out, nil
}

// Built reports whether every Tool is in the cache, without building.
func Built() bool {
	tools, err := Tools()
	if err != nil {
		return false
	}
	for _, t := range tools {
		if ok, err := t.Built(); err != nil || !ok {
			return false
		}
	}
	return true
}
