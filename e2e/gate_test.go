package e2e

import (
	"os"
	"testing"
)

// EnvE2E must be "1" for the end-to-end tests to run.
const EnvE2E = "STRATUM_E2E"

// requireE2E skips t unless the end-to-end tests were asked for.
func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvE2E) != "1" {
		t.Skipf("end-to-end test against a real kubelet: set %s=1 (make e2e-kubelet)", EnvE2E)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 but not root: containerd and kubelet need root", EnvE2E)
	}
}
