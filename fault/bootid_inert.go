//go:build !stratumfault

package fault

// BootID is "": the product always reports the kernel's boot id. (A binary
// built with the stratumfault tag reads an override from its environment,
// for simulated reboots.)
func BootID() string { return "" }

// BootIDReader returns read: the product reads the kernel's boot id.
func BootIDReader(read func() (string, error)) func() (string, error) { return read }
