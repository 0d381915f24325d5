package versions

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// emulationRefusals are fragments of every refusal of a compatibility-
// version flag the binaries make: a case that expects none must show none.
var emulationRefusals = []string{"emulation version", "minCompatibilityVersion", "PreAlpha", "patch version not allowed",
	"component not registered", "duplicate version flag", "EmulationForwardCompatible cannot"}

// alphaWarning is what the binaries log of alpha features with emulation.
const alphaWarning = "alpha features enabled in emulated version, this is unsupported"

// TestRealEmulationRules runs every case of emulationCases whose binary
// is built (1.36.3, 1.37.2) on the real binary, and checks it refuses,
// warns, or gets past flag validation as the case says, so a version bump
// re-checks the rules. Each run stops at a failure that follows flag
// validation: kube-apiserver without a service-account issuer (validated
// with the compatibility versions, in one list), the others at a
// kubeconfig that does not exist; nothing is started or listened on.
// STRATUM_REAL=1 (make test-real) builds missing binaries; otherwise a
// version not built is skipped.
func TestRealEmulationRules(t *testing.T) {
	bins := map[string]map[string]string{}
	for _, v := range kubebuild.Versions {
		if !kubebuild.Built(v) && os.Getenv("STRATUM_REAL") == "" {
			t.Logf("kubernetes %s not built: its cases skip (make real-binaries, or STRATUM_REAL=1 to build it here)", v)
			continue
		}
		b, err := kubebuild.Binaries(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		bins[strings.TrimPrefix(v, "v")] = b
	}
	for _, tc := range emulationCases {
		t.Run(tc.name, func(t *testing.T) {
			bin, ok := bins[tc.binary][tc.component()]
			if !ok {
				t.Skipf("no %s %s built", tc.component(), tc.binary)
			}
			out, stop := runValidation(t, bin, tc.component(), tc.args)
			if !strings.Contains(out, `"command failed"`) {
				t.Fatalf("%s did not stop at its flags (%s):\n%s", bin, stop, out)
			}
			if tc.refuse != "" {
				if !strings.Contains(out, tc.refuse) {
					t.Errorf("%s %v: want the refusal %q, got:\n%s", tc.component(), tc.args, tc.refuse, out)
				}
			} else {
				if !strings.Contains(out, stop) {
					t.Errorf("%s %v: want it past flag validation (stopped by %q), got:\n%s", tc.component(), tc.args, stop, out)
				}
				for _, r := range emulationRefusals {
					if strings.Contains(out, r) {
						t.Errorf("%s %v: refused (%q), the rules accept it:\n%s", tc.component(), tc.args, r, out)
					}
				}
			}
			if got := strings.Contains(out, alphaWarning); got != (tc.warn != "") {
				t.Errorf("%s %v: alpha warning %v, want %v:\n%s", tc.component(), tc.args, got, tc.warn != "", out)
			}
		})
	}
}

// runValidation runs component's binary with args and the flags that make
// it stop right after flag validation, and returns its output and the
// fragment of the failure that stops it when its flags pass.
func runValidation(t *testing.T, bin, component string, args []string) (out, stop string) {
	t.Helper()
	var argv []string
	switch component {
	case nodestate.KubeAPIServer:
		argv = []string{"--etcd-servers=http://127.0.0.1:1", "--service-cluster-ip-range=10.96.0.0/12", "--cert-dir=" + t.TempDir(), "--bind-address=127.0.0.1"}
		stop = "service-account-issuer is a required flag"
	default:
		argv = []string{"--kubeconfig=/nonexistent/kubeconfig", "--secure-port=0"}
		stop = "/nonexistent/kubeconfig"
	}
	for i := 0; i < len(args); i += 2 {
		argv = append(argv, "--"+args[i]+"="+args[i+1])
	}
	// The deadline only guards a binary that went past its flags and is
	// starting: the assertions then fail on its output.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := exec.CommandContext(ctx, bin, slices.Clip(argv)...).CombinedOutput()
	return string(b), stop
}
