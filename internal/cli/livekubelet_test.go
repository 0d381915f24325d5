package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestPlanReadsTheLiveKubelet: plan refuses what run would, by the node's
// running kubelet too. A node state whose patch gives kube-scheduler's
// container its own restartPolicy plans to v1.35.4 (kubelet 1.35 runs it)
// while no API server says otherwise, and is refused by StaticPodKubelet,
// naming kubelet 1.34, once the node's Node says its kubelet is v1.34.4.
func TestPlanReadsTheLiveKubelet(t *testing.T) {
	n := newJSONNode(t)
	n.output = "json"
	b, err := os.ReadFile(n.path("state.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	st := string(b) + "patches:\n  files:\n  - name: kube-scheduler+strategic.yaml\n    content: |\n      spec:\n        containers:\n        - name: kube-scheduler\n          restartPolicy: Always\n"
	n.write("state.yaml", st)
	n.write("rel135.yaml", "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.35.4\nimages:\n"+
		"  kube-apiserver: registry.k8s.io/kube-apiserver:v1.35.4\n  kube-controller-manager: registry.k8s.io/kube-controller-manager:v1.35.4\n  kube-scheduler: registry.k8s.io/kube-scheduler:v1.35.4\n")
	n.su(ExitOK, "write.json", "init", "--state", n.path("state.yaml"))
	n.su(ExitOK, "plan.json", "plan", "--to", n.path("rel135.yaml"))

	srv := nodeServer(t, nil)
	adminConf(t, n.dir, srv.URL)
	objs := n.su(ExitError, "plan.json", "plan", "--to", n.path("rel135.yaml"))
	failed, _ := objs[0]["failedChecks"].([]any)
	var found []string
	for _, f := range failed {
		if m := fmt.Sprint(f); strings.Contains(m, "StaticPodKubelet") {
			found = append(found, m)
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "kubelet 1.34 refuses a restartPolicy on a regular container") || !strings.Contains(found[0], "v1.34.4") {
		t.Fatalf("plan with kubelet v1.34.4 live: StaticPodKubelet findings %q, want one naming kubelet 1.34; all: %v", found, objs)
	}
}
