package proc

// Memory: what a surge's pre-flight needs to know whether two instances of
// a component fit on the node at once.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// MemAvailable is the node's available memory in bytes: the MemAvailable
// line of <root>/meminfo, the kernel's estimate of what can be allocated
// without swapping (page cache that can be dropped included). A meminfo
// without that line (a kernel before 3.14) is an error.
func (s *Scanner) MemAvailable() (uint64, error) {
	name := s.root + "/meminfo"
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, fmt.Errorf("available memory: %w", err)
	}
	v, ok, err := kBField(b, "MemAvailable:")
	if err != nil {
		return 0, fmt.Errorf("available memory: %s: %w", name, err)
	}
	if !ok {
		return 0, fmt.Errorf("available memory: %s has no MemAvailable line", name)
	}
	return v, nil
}

// RSS is the resident memory of ps in bytes: the sum of the VmRSS lines of
// their /proc/<pid>/status. A process that is gone (exited, a zombie, or
// its pid now names another process) counts 0; any other failure to read
// is an error, never a 0.
func (s *Scanner) RSS(ps []Process) (uint64, error) {
	var sum uint64
	for _, p := range ps {
		b, err := os.ReadFile(s.pidFile(p.PID, "status"))
		if isGone(err) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("resident memory of pid %d: %w", p.PID, err)
		}
		v, ok, err := kBField(b, "VmRSS:")
		if err != nil {
			return 0, fmt.Errorf("resident memory of pid %d: %w", p.PID, err)
		}
		// A status read after the pid was reused is another process's.
		if err := s.same(p); errors.Is(err, ErrProcessGone) {
			continue
		} else if err != nil {
			return 0, fmt.Errorf("resident memory of pid %d: %w", p.PID, err)
		}
		if ok { // a zombie or kernel thread has no VmRSS line
			sum += v
		}
	}
	return sum, nil
}

// kBField finds the line starting with key in a "Key:   123 kB" file
// (meminfo, status) and returns its value in bytes.
func kBField(b []byte, key string) (uint64, bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(key))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, false, fmt.Errorf("%s line %q is not \"<n> kB\"", key, sc.Bytes())
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s line: %w", key, err)
		}
		return v * 1024, true, nil
	}
	return 0, false, sc.Err()
}
