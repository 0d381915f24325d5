package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of start ticks and Mark.Ticks: clock ticks per second as
// the kernel reports them to user space (USER_HZ, sysconf(_SC_CLK_TCK)). It is
// 100 on every Linux architecture this product runs on, which is what lets a
// centisecond reading of /proc/uptime stand for ticks.
const userHZ = 100

// Mark returns now on this node: clock ticks since boot, read from the first
// field of <root>/uptime (seconds with two decimals, floored to whole
// centiseconds, i.e. ticks at USER_HZ=100), and the boot id from
// <root>/sys/kernel/random/boot_id. Both come from the boot-time clock that
// stamps start ticks in /proc/<pid>/stat. An error means neither could be
// read.
func (s *Scanner) Mark() (Mark, error) {
	name := s.root + "/uptime"
	b, err := os.ReadFile(name)
	if err != nil {
		return Mark{}, fmt.Errorf("take a mark: %w", err)
	}
	ticks, err := parseUptime(b)
	if err != nil {
		return Mark{}, fmt.Errorf("take a mark: parse %s: %w", name, err)
	}
	id, err := s.bootID()
	if err != nil {
		return Mark{}, fmt.Errorf("take a mark: %w", err)
	}
	return Mark{Ticks: ticks, BootID: id}, nil
}

// parseUptime turns the first field of /proc/uptime ("12345.67 ...") into
// centiseconds, floored: digits past the second decimal are dropped.
func parseUptime(b []byte) (uint64, error) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, errors.New("empty")
	}
	secs, frac, _ := strings.Cut(string(f[0]), ".")
	sec, err := strconv.ParseUint(secs, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("seconds %q: %w", f[0], err)
	}
	frac = (frac + "00")[:2]
	cs, err := strconv.ParseUint(frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fraction %q: %w", f[0], err)
	}
	return sec*userHZ + cs, nil
}

func (s *Scanner) bootID() (string, error) {
	if s.bootIDOverride != "" {
		return s.bootIDOverride, nil
	}
	name := s.root + "/sys/kernel/random/boot_id"
	b, err := os.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("read boot id: %s is empty", name)
	}
	return id, nil
}

// Replaced reports whether t has been replaced since m: done is true when at
// least one process of t.Binary runs and none started before m. A process
// whose start ticks are <= m.Ticks started before m — one started in m's own
// tick included (see the package doc). stale lists the processes that
// started before m, sorted by pid. If m was taken in another boot (its boot
// id is not the current one), every running process counts as started after
// it. An error means the answer is unknown; a mark without a boot id is an
// error, not a mark from another boot.
func (s *Scanner) Replaced(t Target, m Mark) (done bool, stale []Process, err error) {
	if m.BootID == "" {
		return false, nil, fmt.Errorf("has %s been replaced: mark has no boot id (take it with Mark)", t.Name)
	}
	ps, err := s.Of(t)
	if err != nil {
		return false, nil, fmt.Errorf("has %s been replaced: %w", t.Name, err)
	}
	id, err := s.bootID()
	if err != nil {
		return false, nil, fmt.Errorf("has %s been replaced: %w", t.Name, err)
	}
	if id == m.BootID {
		for _, p := range ps {
			if p.StartTicks <= m.Ticks {
				stale = append(stale, p)
			}
		}
	}
	return len(ps) > 0 && len(stale) == 0, stale, nil
}

// PastMark returns once the clock has moved past m's tick, so that a
// process started from anything written after PastMark returns has start
// ticks greater than m.Ticks and counts as started after m. Call it between
// taking a mark and the write the mark guards: without it, a kubelet that
// starts the new process within the same 10 ms tick would have it count as
// predating the mark. It waits at most one tick (plus scheduling); a mark
// of another boot, or one already past, returns at once. An error means
// the clock could not be read.
func (s *Scanner) PastMark(ctx context.Context, m Mark) error {
	for {
		now, err := s.Mark()
		if err != nil {
			return err
		}
		if now.BootID != m.BootID || now.Ticks > m.Ticks {
			return nil
		}
		// Sleep through the whole ticks still to come, then poll the last
		// one by the millisecond.
		wait := max(time.Duration(m.Ticks-now.Ticks)*(time.Second/userHZ), time.Millisecond)
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting for the clock to move past the mark taken before the write: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}
