package cluster

// SetBeginReported makes h's next Begin report err after its write
// committed, as a write that timed out after etcd applied it does.
func SetBeginReported(h *Hold, err error) { h.beginReported = err }
