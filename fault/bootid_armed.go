//go:build stratumfault

package fault

import (
	"os"
	"strings"
	"sync"
)

// BootIDEnvVar, in a binary built with the stratumfault tag, sets the boot
// id the process reports instead of the kernel's: a test that killed every
// process of a node and started its kubelet again (a simulated reboot) runs
// stratum-upgrade in the "new boot" this way. Empty or unset: the kernel's.
const BootIDEnvVar = "STRATUM_FAULT_BOOT_ID"

var bootID = sync.OnceValue(func() string { return strings.TrimSpace(os.Getenv(BootIDEnvVar)) })

// BootID is the boot id BootIDEnvVar sets, or "" when it sets none. Read
// once per process, so every reader of the boot id agrees.
func BootID() string { return bootID() }

// BootIDReader returns a boot id reader that reports BootID when it is set
// and otherwise calls read.
func BootIDReader(read func() (string, error)) func() (string, error) {
	if id := BootID(); id != "" {
		return func() (string, error) { return id, nil }
	}
	return read
}
