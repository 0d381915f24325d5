package fault

import (
	"errors"
	"testing"
)

// In a build without the stratumfault tag the boot id cannot be overridden:
// the variable a tagged build reads changes nothing.
func TestBootIDInertWithoutTag(t *testing.T) {
	if Enabled {
		t.Skip("built with stratumfault")
	}
	t.Setenv("STRATUM_"+"FAULT_BOOT_ID", "00000000-0000-0000-0000-000000000001")
	if id := BootID(); id != "" {
		t.Errorf("BootID() = %q in the product build, want \"\"", id)
	}
	errRead := errors.New("the kernel's")
	if _, err := BootIDReader(func() (string, error) { return "", errRead })(); !errors.Is(err, errRead) {
		t.Errorf("BootIDReader did not call the kernel reader: %v", err)
	}
}
