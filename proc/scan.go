package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Scanner reads one procfs mount. Its methods are safe for concurrent use;
// every call reads /proc afresh, nothing is cached between calls. The zero
// Scanner is not usable: get one from [NewScanner] or [Host].
type Scanner struct {
	root string
	// scopes holds the pids the scanner is scoped to by Within: a process is
	// seen only when it is, or descends from, every one of them.
	scopes []int
	// live is true when root is the procfs of this process's own pid
	// namespace, so its pids can be handed to pidfd_open.
	live bool
	// bootIDOverride, when set by WithBootID, replaces the boot id read
	// from root.
	bootIDOverride string
	// cgroupRoot, when set by WithCgroupRoot, replaces DefaultCgroupRoot.
	cgroupRoot string
	// podsSeen, in a scoped scanner, is set once a process of its tree
	// was seen in a pod cgroup (Identify); shared by its copies.
	podsSeen *atomic.Bool
	// armed holds the exec subscriptions Arm kept, by binary base name
	// (guarded by armedMu). A copy of the Scanner (Within, WithBootID,
	// WithCgroupRoot) starts with none: its view of the table differs.
	armed map[string]*armedWatch
}

// WithBootID returns a copy of s that reports id as the current boot id
// instead of reading it. It exists for reboot simulations: after every
// component was killed and started again, a resume that sees a new boot id
// must treat every process as new, exactly as after a real reboot.
func (s *Scanner) WithBootID(id string) *Scanner {
	c := *s
	c.armed = nil
	c.bootIDOverride = id
	return &c
}

// NewScanner returns a Scanner reading the procfs mounted at root ("/proc"
// normally). It fails unless root is a directory whose process table can be
// listed and whose uptime and sys/kernel/random/boot_id files read as the
// kernel writes them: everything a Mark needs. A directory laid out that way
// by hand is accepted, which is how tests build a fake process table.
func NewScanner(root string) (*Scanner, error) {
	s := &Scanner{root: root, live: isLive(root)}
	if _, err := s.list(); err != nil {
		return nil, fmt.Errorf("proc root %s is not a readable procfs: %w", root, err)
	}
	if _, err := s.Mark(); err != nil {
		return nil, fmt.Errorf("proc root %s is not a readable procfs: %w", root, err)
	}
	return s, nil
}

var host = sync.OnceValue(func() *Scanner {
	return &Scanner{root: procfs.DefaultMountPoint, live: isLive(procfs.DefaultMountPoint)}
})

// tableScans counts the scans of a whole process table (list), so that a
// test can tell a wait that started from Arm's answer from one that
// scanned again.
var tableScans atomic.Uint64

// Host returns the Scanner of the host's /proc, created once. It is not
// checked the way NewScanner checks its root: if /proc cannot be read, every
// call on it reports that as an error.
func Host() *Scanner { return host() }

// isLive reports whether root/self names this process, i.e. whether root's
// pids are pids in this process's namespace.
func isLive(root string) bool {
	self, err := os.Readlink(root + "/self")
	return err == nil && self == strconv.Itoa(os.Getpid())
}

// Within returns a copy of s that only sees process pid and its descendants.
// Scoping again narrows further: s.Within(a).Within(b) sees only processes
// descending from both a and b. The scope applies to every method that looks
// at processes, StartTicks included (a pid outside the scope is not alive
// for it); Mark is unaffected.
func (s *Scanner) Within(pid int) *Scanner {
	c := *s
	c.armed = nil
	c.scopes = append(slices.Clip(s.scopes), pid)
	c.podsSeen = new(atomic.Bool)
	return &c
}

// PIDs lists the processes whose argv[0] base name equals binary, sorted by
// pid. binary may be given as a path; only its base name is compared. A
// process that vanishes mid-scan, a zombie and a dead task are skipped: they
// are gone. Any other failure to read the table — the root itself, or a
// permission error on one entry — is returned as an error: the answer is
// unknown, and no partial list is returned.
//
// It reads only /proc/<pid>/cmdline for every process, and /proc/<pid>/stat
// for the ones whose name matches (and their ancestors, in a scoped scanner).
func (s *Scanner) PIDs(binary string) ([]Process, error) {
	if binary == "" {
		return nil, errors.New("list processes: empty binary name")
	}
	want := path.Base(binary)
	pids, err := s.list()
	if err != nil {
		return nil, fmt.Errorf("list %s processes: %w", want, err)
	}
	out, err := s.among(pids, want)
	if err != nil {
		return nil, fmt.Errorf("list %s processes: %w", want, err)
	}
	return out, nil
}

// among is PIDs over the given pids instead of the whole table: those of
// them that run want (a base name) now, within the scope, sorted by pid,
// each once. It reads what PIDs reads of each, and treats a vanished pid,
// a zombie and a dead task as gone, any other failure as unknown (an
// error) the same way.
func (s *Scanner) among(pids []int, want string) ([]Process, error) {
	var (
		out     []Process
		buf     = make([]byte, 4096)
		tree    = s.newAncestry()
		skipped bool // an entry vanished: check the table is still there
		err     error
	)
	for _, pid := range pids {
		var arg0 []byte
		arg0, buf, err = s.argv0(pid, buf)
		if err != nil {
			if isGone(err) {
				skipped = true
				continue
			}
			return nil, err
		}
		if len(arg0) == 0 || string(baseName(arg0)) != want {
			continue
		}
		st, err := s.readStat(pid, buf)
		if err != nil {
			if isGone(err) {
				skipped = true
				continue
			}
			return nil, err
		}
		if st.isGone() {
			continue
		}
		in, err := tree.contains(pid, st.ppid)
		if err != nil {
			return nil, err
		}
		if in {
			out = append(out, Process{PID: pid, StartTicks: st.ticks})
		}
	}
	if skipped {
		if err := s.present(); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b Process) int { return a.PID - b.PID })
	return slices.CompactFunc(out, func(a, b Process) bool { return a.PID == b.PID }), nil
}

// StartTicks reports when process pid started, in clock ticks since boot
// (field 22 of /proc/<pid>/stat). alive is false, with a nil error, when the
// process has vanished, is a zombie or dead task, or lies outside the
// scanner's scope. err is non-nil only when the answer is unknown: the stat
// file could not be read for any other reason, or did not parse.
func (s *Scanner) StartTicks(pid int) (ticks uint64, alive bool, err error) {
	st, err := s.readStat(pid, make([]byte, 512))
	if err != nil {
		if !isGone(err) {
			return 0, false, err
		}
		if err := s.present(); err != nil {
			return 0, false, fmt.Errorf("start ticks of pid %d: %w", pid, err)
		}
		return 0, false, nil
	}
	if st.isGone() {
		return st.ticks, false, nil
	}
	in, err := s.newAncestry().contains(pid, st.ppid)
	if err != nil {
		return 0, false, err
	}
	if !in {
		return 0, false, nil
	}
	return st.ticks, true, nil
}

// Running reports whether any process of t.Binary is present (PIDs is not
// empty). It covers a process that has closed its listener while it shuts
// down, and a component with no listener at all. An error means the answer is
// unknown.
func (s *Scanner) Running(t Target) (bool, error) {
	ps, err := s.Of(t)
	if err != nil {
		return false, fmt.Errorf("is %s running: %w", t.Name, err)
	}
	return len(ps) > 0, nil
}

// present checks that the process table is still there, for an absent
// entry is a gone process only in a table that is: a procfs unmounted (or a
// fake root removed) mid-scan makes every entry absent.
func (s *Scanner) present() error {
	if _, err := os.Stat(s.root + "/uptime"); err != nil {
		return fmt.Errorf("proc root %s unreadable: %w", s.root, err)
	}
	return nil
}

// list returns the pids in the process table (numeric entries of root).
func (s *Scanner) list() ([]int, error) {
	tableScans.Add(1)
	fs, err := procfs.NewFS(s.root)
	if err != nil {
		return nil, err
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.root, err)
	}
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.PID
	}
	return pids, nil
}

func (s *Scanner) pidFile(pid int, name string) string {
	return s.root + "/" + strconv.Itoa(pid) + "/" + name
}

// readFile reads root/<pid>/name whole into buf, growing it as needed, and
// returns the content and the (possibly grown) buffer. stopAtNUL ends the
// read as soon as the content holds a NUL byte.
func readFile(name string, buf []byte, stopAtNUL bool) (content, grown []byte, err error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, buf, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	const maxSize = 1 << 20
	if len(buf) == 0 {
		buf = make([]byte, 512)
	}
	n := 0
	for {
		if n == len(buf) {
			if len(buf) >= maxSize {
				return buf[:n], buf, nil
			}
			buf = slices.Grow(buf, len(buf))[:2*len(buf)]
		}
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, buf, &os.PathError{Op: "read", Path: name, Err: err}
		}
		if m == 0 {
			return buf[:n], buf, nil
		}
		if stopAtNUL && bytes.IndexByte(buf[n:n+m], 0) >= 0 {
			return buf[:n+m], buf, nil
		}
		n += m
	}
}

// argv0 returns pid's argv[0]: the bytes of its cmdline up to the first NUL,
// or all of it when it holds none. It is empty for a kernel thread and a
// zombie.
func (s *Scanner) argv0(pid int, buf []byte) ([]byte, []byte, error) {
	b, buf, err := readFile(s.pidFile(pid, "cmdline"), buf, true)
	if err != nil {
		return nil, buf, err
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b, buf, nil
}

func baseName(b []byte) []byte {
	b = bytes.TrimRight(b, "/")
	if i := bytes.LastIndexByte(b, '/'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// procStat is what this package needs of /proc/<pid>/stat.
type procStat struct {
	state byte   // field 3
	ppid  int    // field 4
	ticks uint64 // field 22, starttime
}

func (st procStat) isGone() bool { return st.state == 'Z' || st.state == 'X' || st.state == 'x' }

func (s *Scanner) readStat(pid int, buf []byte) (procStat, error) {
	name := s.pidFile(pid, "stat")
	b, _, err := readFile(name, buf, false)
	if err != nil {
		return procStat{}, err
	}
	if len(b) == 0 {
		// The kernel serves stat for every task it still knows; an empty
		// read is a task that went away under the open descriptor.
		return procStat{}, &os.PathError{Op: "read", Path: name, Err: unix.ESRCH}
	}
	st, err := parseStat(b)
	if err != nil {
		return procStat{}, fmt.Errorf("parse %s: %w", name, err)
	}
	return st, nil
}

// parseStat parses the fields of a stat line this package uses. comm (field
// 2) is in parentheses and may hold anything, ')' and spaces included, but
// nothing after it can hold ')', so the fields start after the last one.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("no ')' closing the comm field")
	}
	var (
		st    procStat
		field = 2 // the field the last token was
		rest  = b[i+1:]
	)
	for len(rest) > 0 && field < 22 {
		rest = bytes.TrimLeft(rest, " \n")
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		tok := rest[:j]
		rest = rest[j:]
		if len(tok) == 0 {
			break
		}
		field++
		switch field {
		case 3:
			if len(tok) != 1 {
				return procStat{}, fmt.Errorf("state field %q is not one letter", tok)
			}
			st.state = tok[0]
		case 4:
			v, err := strconv.Atoi(string(tok))
			if err != nil {
				return procStat{}, fmt.Errorf("ppid field: %w", err)
			}
			st.ppid = v
		case 22:
			v, err := strconv.ParseUint(string(tok), 10, 64)
			if err != nil {
				return procStat{}, fmt.Errorf("starttime field: %w", err)
			}
			st.ticks = v
		}
	}
	if field < 22 {
		return procStat{}, fmt.Errorf("only %d fields, want at least 22", field)
	}
	return st, nil
}

// isGone reports whether err from reading a /proc/<pid> file means the
// process no longer exists.
func isGone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}
