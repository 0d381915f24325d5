//go:build stratumfault

package fault

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A tagged build reports the boot id its environment sets, through both
// BootID and BootIDReader; without the variable it reads the kernel's. Each
// case runs in a child: the variable is read once per process.
func TestBootIDArmed(t *testing.T) {
	if os.Getenv("FAULT_TEST_BOOT_ID_CHILD") != "" {
		id, err := BootIDReader(func() (string, error) { return "kernel", nil })()
		os.Stdout.WriteString(BootID() + "|" + id + "\n")
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, c := range []struct{ env, want string }{
		{"", "|kernel"},
		{"  ", "|kernel"},
		{"0f0f-new-boot\n", "0f0f-new-boot|0f0f-new-boot"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBootIDArmed$")
		cmd.Env = append(os.Environ(), "FAULT_TEST_BOOT_ID_CHILD=1", BootIDEnvVar+"="+c.env)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		got, _, _ := strings.Cut(string(out), "\n")
		if got != c.want {
			t.Errorf("%s=%q: BootID|reader = %q, want %q", BootIDEnvVar, c.env, got, c.want)
		}
	}
}
