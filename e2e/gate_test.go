package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// EnvNamespace, set to 1 with EnvE2E, runs the end-to-end tests in a PID
// and mount namespace of their own (`unshare --pid --fork --mount-proc`):
// the namespace holds containerd, kubelet, the shims and the containers, and
// its /proc shows nothing else, so stratum-upgrade's scan stays unscoped
// (no --proc-scope: every process of the "node") while other tests'
// component processes on a shared machine are invisible to it. When the
// test binary (the namespace's PID 1) exits, the kernel kills everything
// left in it, and the namespace's mounts go with it.
const EnvNamespace = "STRATUM_E2E_NS"

// inNamespace marks the re-executed test binary.
const inNamespace = "STRATUM_E2E_IN_NS"

func TestMain(m *testing.M) {
	if os.Getenv(EnvE2E) == "1" && os.Getenv(EnvNamespace) == "1" && os.Getenv(inNamespace) == "" {
		os.Exit(reexecInNamespace())
	}
	os.Exit(m.Run())
}

func reexecInNamespace() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: re-exec in a namespace:", err)
		return 1
	}
	cmd := exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", "--", self}, os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), inNamespace+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: re-exec in a namespace:", err)
		return 1
	}
	return 0
}
