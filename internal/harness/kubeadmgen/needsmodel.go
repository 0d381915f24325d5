package kubeadmgen

// NeedsModel are the configurations whose adoption restarts components
// today, each with what the node state cannot yet say: their fixtures are
// the real kubeadm's output, committed before the node model that can
// express them (issue 28 item 1, extra volumes, extra environment
// variables and kubeadm patches in the node state). The adoption tests
// (TestAdoptFixtures here, adopt.TestKubeadmFixturesAdoptWithoutRestart)
// expect these to restart a component and fail when one no longer does:
// remove its entry then. An empty map is the goal.
//
// Empty since the node state carries extraVolumes, extraEnvs, resources,
// patches and dual-stack ranges (issue 28 items 1 and 4): every fixture
// adopts with every component kept running.
var NeedsModel = map[string]string{}
