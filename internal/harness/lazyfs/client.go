package lazyfs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// FS is a mounted lazyfs, served by a child process (see Mount). Its
// methods are safe for concurrent use, but PowerLoss, Unmount and Close
// must not race with I/O on the mount.
type FS struct {
	backing, mountpoint string

	mu   sync.Mutex // one request at a time
	cmd  *exec.Cmd
	conn net.Conn
	enc  *json.Encoder
	dec  *json.Decoder
	done bool // unmounted; the child has exited or is exiting
}

// Mount mounts mountpoint as a loopback of backing with the durability model
// of the package documentation. Everything in backing at this point is
// durable. Both directories must exist; the caller must be root and
// /dev/fuse must exist (no fusermount is used).
//
// The FUSE server runs in a child process, the running executable
// re-executed with LAZYFS_SERVER_CHILD set, which this package's init
// intercepts: the caller must be a binary that imports this package (any
// test binary that uses it is). If the caller dies, the child unmounts.
func Mount(backing, mountpoint string, opts Options) (*FS, error) {
	var err error
	if backing, err = filepath.Abs(backing); err != nil {
		return nil, err
	}
	if mountpoint, err = filepath.Abs(mountpoint); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "lazyfs-control"), os.NewFile(uintptr(fds[1]), "lazyfs-control")
	defer ours.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("lazyfs: starting server child: %w", err)
	}
	conn, err := net.FileConn(ours)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("lazyfs: %w", err)
	}
	f := &FS{backing: backing, mountpoint: mountpoint, cmd: cmd, conn: conn,
		enc: json.NewEncoder(conn), dec: json.NewDecoder(conn)}
	if _, err := f.call(request{Cmd: "mount", Backing: backing, Mountpoint: mountpoint, Opts: opts}); err != nil {
		f.finish()
		return nil, err
	}
	return f, nil
}

// call sends req and returns the child's answer.
func (f *FS) call(req request) (response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.callLocked(req)
}

func (f *FS) callLocked(req request) (response, error) {
	var resp response
	if f.done {
		return resp, fmt.Errorf("lazyfs: %s: %s is unmounted", req.Cmd, f.mountpoint)
	}
	if err := f.enc.Encode(req); err != nil {
		return resp, fmt.Errorf("lazyfs: %s: server child gone: %w", req.Cmd, err)
	}
	if err := f.dec.Decode(&resp); err != nil {
		return resp, fmt.Errorf("lazyfs: %s: server child gone: %w", req.Cmd, err)
	}
	if resp.Err != "" {
		return resp, errors.New(resp.Err)
	}
	return resp, nil
}

// finish closes the control connection and reaps the child (killing it
// after 10s). The caller holds f.mu or owns f exclusively.
func (f *FS) finish() {
	f.done = true
	f.conn.Close()
	exited := make(chan struct{})
	go func() { f.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		f.cmd.Process.Kill()
		<-exited
	}
}

// Mountpoint returns the absolute path of the mount.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Backing returns the absolute path of the backing directory.
func (f *FS) Backing() string { return f.backing }

// Path joins rel to the mountpoint.
func (f *FS) Path(rel ...string) string {
	return filepath.Join(append([]string{f.mountpoint}, rel...)...)
}

// PowerLoss cuts the power: it unmounts, rewrites the backing directory to
// exactly the durable state (see the package documentation), forgets
// everything not durable, and mounts again at the same mountpoint.
//
// The caller must have closed every file and directory it opened on the
// mount (closing does not sync anything). If the mount is still busy after
// 2s, PowerLoss returns an error naming the files still open and changes
// nothing. Inotify watches on the mount end with the unmount (IN_UNMOUNT,
// IN_IGNORED) and must be added again.
func (f *FS) PowerLoss() error {
	_, err := f.call(request{Cmd: "powerloss"})
	return err
}

// Stats returns a snapshot of the counters.
func (f *FS) Stats() Stats {
	resp, _ := f.call(request{Cmd: "stats"})
	return resp.Stats
}

// Unmount unmounts without a power loss: the backing directory keeps the
// current state, as after a clean shutdown. If files on the mount are still
// open it fails and leaves the mount in place. Unmount of an unmounted FS is
// a no-op.
func (f *FS) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return nil
	}
	if _, err := f.callLocked(request{Cmd: "unmount"}); err != nil {
		return err
	}
	f.finish()
	return nil
}

// Close is Unmount, except that a busy mount is detached lazily
// (MNT_DETACH) rather than left in place, and the busy error is still
// reported. After Close the mountpoint is never mounted.
func (f *FS) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return nil
	}
	_, err := f.callLocked(request{Cmd: "close"})
	f.finish()
	if isMounted(f.mountpoint) {
		if derr := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); derr != nil {
			err = errors.Join(err, fmt.Errorf("lazyfs: detach %s: %w", f.mountpoint, derr))
		}
	}
	return err
}

// Injection is an installed Rule; its counters live in the server child.
type Injection struct {
	Rule
	f  *FS
	id int
}

// Inject installs r and returns it. Rules are checked in the order they
// were installed; every matching rule counts the operation as seen and the
// first that fires decides the errno. Rules survive PowerLoss. Inject
// panics on a malformed rule (bad pattern, zero Errno) or an unmounted FS.
func (f *FS) Inject(r Rule) *Injection {
	if err := r.validate(); err != nil {
		panic(err)
	}
	resp, err := f.call(request{Cmd: "inject", Rule: r})
	if err != nil {
		panic(err)
	}
	return &Injection{Rule: r, f: f, id: resp.ID}
}

// Clear retires all rules. Their counters stay readable.
func (f *FS) Clear() {
	f.call(request{Cmd: "clear"})
}

// Seen returns how many operations matched the rule, failed or not.
func (i *Injection) Seen() int64 {
	resp, _ := i.f.call(request{Cmd: "counts", ID: i.id})
	return resp.Seen
}

// Fired returns how many operations the rule failed.
func (i *Injection) Fired() int64 {
	resp, _ := i.f.call(request{Cmd: "counts", ID: i.id})
	return resp.Fired
}

func (i *Injection) String() string {
	return fmt.Sprintf("%s %q -> %v", i.Op, i.Path, i.Errno)
}

// isMounted reports whether p is a mountpoint in /proc/self/mountinfo.
func isMounted(p string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range splitLines(string(data)) {
		var id, parent int
		var dev, root, mp string
		if n, _ := fmt.Sscan(line, &id, &parent, &dev, &root, &mp); n == 5 && unescapeMount(mp) == p {
			return true
		}
	}
	return false
}
