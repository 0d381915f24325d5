package kubeadmgen

// NeedsModel are the configurations whose adoption restarts components
// today, each with what the node state cannot yet say: their fixtures are
// the real kubeadm's output, committed before the node model that can
// express them (issue 28 item 1, extra volumes, extra environment
// variables and kubeadm patches in the node state). The adoption tests
// (TestAdoptFixtures here, adopt.TestKubeadmFixturesAdoptWithoutRestart)
// expect these to restart a component and fail when one no longer does:
// remove its entry then. An empty map is the goal.
var NeedsModel = map[string]string{
	"audit":      "apiServer.extraVolumes: the node state has no extra volumes (adoption takes them for CA certificate directories)",
	"proxy-env":  "extraEnvs: the node state has no environment variables",
	"patches":    "kubeadm patches: the node state has no resources, labels, annotations, probe settings or patches",
	"dual-stack": "dual-stack subnets: the node state's networking.serviceCIDR and podCIDR hold one CIDR each",
}
