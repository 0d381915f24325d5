// Package proc observes control-plane processes through /proc: which
// processes run a component, when each started, whether the component
// answers, and waits on those facts with deadlines.
//
// # Identity
//
// A process's identity is (pid, start ticks), never a pid alone: a pid can be
// reused, a start time in clock ticks since boot cannot within one boot.
// Start ticks are field 22 of /proc/<pid>/stat, parsed after the LAST ')' of
// the line because the comm field before it may itself hold spaces and ')'.
//
// A process runs a binary when the base name of its argv[0] (the bytes of
// /proc/<pid>/cmdline up to the first NUL) equals the binary's name (PIDs).
// The rule is deliberately loose: it does not look at /proc/<pid>/exe, so an
// image's entrypoint that has no path on the host is still found, under
// whatever directory argv[0] names. A process that rewrote its argv keeps
// whatever it wrote. Of those, the component's are the ones in a static
// pod's cgroup, where kubelet makes pod cgroups; the others are foreign
// ([Scanner.Identify], docs/architecture.md "Process identity"). Every wait
// on a Target looks only at the component's.
//
// # Gone versus unknown
//
// A process that vanished mid-scan (its /proc entry is absent, or reads fail
// with ESRCH), a zombie (state Z) and a dead task (state X) are gone: they no
// longer run anything and are never listed. Anything else that stops a read —
// the proc root itself missing or not a directory, a permission error on any
// entry, an unexpected file shape — is unknown: it is returned as an error and
// never taken for gone, so a caller waiting for a process to exit cannot be
// told it has when the process table simply could not be read. A procfs
// mounted with hidepid=invisible hides other users' processes without any
// error; run as root (as the product does) or without hidepid.
//
// # Marks
//
// A [Mark] is a moment on this node: the clock ticks since boot from
// /proc/uptime (centiseconds, floored, which is clock ticks at USER_HZ=100,
// the value on every Linux architecture the product runs on; /proc/<pid>/stat
// reports start times in the same unit from the same boot-time clock) and the
// boot id from /proc/sys/kernel/random/boot_id.
//
// A process started in the mark's own tick counts as started BEFORE the mark:
// stale means start ticks <= Mark.Ticks. Ticks are 10 ms wide, and the
// ordering of a process start and a mark within one tick cannot be known, so
// the rule is conservative: kubelet takes far longer than a tick to start a
// pod from a manifest written after the mark.
//
// Ticks restart at boot. When a mark's boot id differs from the current boot
// id, every running process counts as started after the mark.
//
// # Scanners
//
// A [Scanner] reads one procfs mount. [Host] scans the host's /proc, and the
// package-level functions are conveniences on it. [Scanner.Within] scopes a
// scanner to one process and its descendants, judged by each candidate's
// current parent chain (field 4 of stat): tests and the kubelet stand-in scope
// their scans to their own process tree so that processes of the same name
// elsewhere on the machine never count. An orphan reparented to init (or to a
// subreaper outside the scope) falls out of the scope.
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
	// NotPods are static pod UIDs whose processes are not t's for this
	// look: a surge replacement runs a second instance of the component
	// in its own pod, and the wait for the canonical pod's replacement
	// must not count the surge pod's processes (started before its mark)
	// as stale. It takes effect where pod cgroups are in use.
	NotPods []string
}

// Instance is the processes of one component that one static pod runs:
// with a surge replacement, the old and the new instance of a component
// run side by side, each in its own pod. PodUID is the pod's UID as its
// cgroup names it (dashes, never the systemd driver's underscores).
type Instance struct {
	PodUID    string    `json:"podUID"`
	Processes []Process `json:"processes"`
}

// Process is one process's identity.
type Process struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"` // clock ticks since boot, /proc/<pid>/stat field 22
}

// Mark is a moment on this node: clock ticks since boot plus the boot id. It
// is taken just before a manifest write; a process started after it was
// started by kubelet from that write or a later one.
type Mark struct {
	Ticks  uint64 `json:"ticks"`
	BootID string `json:"bootID"`
}
