package cluster

import "context"

// SetBeginReported makes h's next Begin report err after its write
// committed, as a write that timed out after etcd applied it does.
func SetBeginReported(h *Hold, err error) { h.beginReported = err }

// SetBeginLate makes h's next Begin hold its write back and report err in
// its place; the returned func sends the write then, as one that commits
// after Begin's read-back does, and reports whether it took effect.
func SetBeginLate(h *Hold, err error) func() (bool, error) {
	l := &lateWrite{err: err}
	h.beginLate = l
	return func() (bool, error) {
		r, err := l.send(context.Background())
		if err != nil {
			return false, err
		}
		return r.Succeeded, nil
	}
}
