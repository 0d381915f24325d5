// Package proc observes control-plane processes through /proc: which
// processes run a component, when each started, whether the component
// answers, and waits on those facts with deadlines.
//
// A process's identity is (pid, start ticks), never a pid alone: a pid can be
// reused, a start time in clock ticks since boot cannot within one boot.
// A zombie or a process that vanished mid-scan is gone; a /proc that cannot
// be read is unknown, reported as an error and never taken for gone.
package proc

// Target says how to find and check one component on this node. It is
// derived from the rendered manifest (manifest.Target) so that proc never
// needs to know how components are configured.
type Target struct {
	// Name is the component name, used in messages.
	Name string
	// Binary is the argv[0] basename the component's process runs under.
	Binary string
	// Health is the component's localhost health endpoint, e.g.
	// "https://127.0.0.1:10259/healthz". Empty means the component has no
	// listener (kube-vip): Active then means Running.
	Health string
}

// Process is one process's identity.
type Process struct {
	PID        int
	StartTicks uint64 // clock ticks since boot, /proc/<pid>/stat field 22
}

// Mark is a moment on this node: clock ticks since boot plus the boot id. It
// is taken just before a manifest write; a process started after it was
// started by kubelet from that write or a later one.
type Mark struct {
	Ticks  uint64 `json:"ticks"`
	BootID string `json:"bootID"`
}
