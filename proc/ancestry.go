package proc

import "fmt"

// ancestry answers whether pids lie within a scanner's scopes, caching the
// parents it reads during one call.
type ancestry struct {
	s       *Scanner
	parents map[int]int // pid -> ppid; -1 once the pid is gone
	buf     []byte
}

func (s *Scanner) newAncestry() *ancestry { return &ancestry{s: s} }

// contains reports whether pid, whose parent is ppid, is or descends from
// every scope pid.
func (a *ancestry) contains(pid, ppid int) (bool, error) {
	for _, scope := range a.s.scopes {
		in, err := a.descends(pid, ppid, scope)
		if err != nil || !in {
			return false, err
		}
	}
	return true, nil
}

func (a *ancestry) descends(pid, ppid, scope int) (bool, error) {
	if pid == scope {
		return true, nil
	}
	cur := ppid
	// pid_max is at most 2^22, so a longer chain is a loop in a fake table.
	for range 1 << 22 {
		if cur == scope {
			return true, nil
		}
		if cur <= 0 {
			return false, nil
		}
		next, err := a.parent(cur)
		if err != nil {
			return false, err
		}
		if next < 0 || next == cur {
			return false, nil
		}
		cur = next
	}
	return false, fmt.Errorf("parent chain of pid %d does not end", pid)
}

func (a *ancestry) parent(pid int) (int, error) {
	if p, ok := a.parents[pid]; ok {
		return p, nil
	}
	if a.parents == nil {
		a.parents = make(map[int]int)
		a.buf = make([]byte, 512)
	}
	st, err := a.s.readStat(pid, a.buf)
	switch {
	case err != nil && isGone(err):
		a.parents[pid] = -1
	case err != nil:
		return 0, err
	default:
		a.parents[pid] = st.ppid
	}
	return a.parents[pid], nil
}
