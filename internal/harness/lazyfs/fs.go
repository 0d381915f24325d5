package lazyfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options configure Mount.
type Options struct {
	// StashDir holds inodes unlinked since the last power loss and the
	// scratch trees of PowerLoss. It must be on the same filesystem as
	// the backing directory and must not be inside it. Mount empties it.
	// Default: "<backing>.lazyfs" next to the backing directory.
	StashDir string

	// TornLastWrite makes PowerLoss keep a prefix of the last unsynced
	// WRITE request on top of the durable content of its file (see the
	// package documentation).
	TornLastWrite bool

	// Seed seeds the choice of the torn prefix length.
	Seed uint64

	// Debug logs every FUSE request.
	Debug bool
}

// Stats counts what the filesystem served. Counters accumulate over the
// life of the FS; the Last* fields describe the most recent PowerLoss.
type Stats struct {
	Writes       int64 // WRITE requests served
	BytesWritten int64 // bytes written by them
	Fsyncs       int64 // fsync/fdatasync on regular files and others
	DirFsyncs    int64 // fsync on directories
	PowerLosses  int

	LastLostBytes     int64 // file bytes rolled back or cut off
	LastRevertedFiles int   // files whose data was rolled back
	LastRevertedDirs  int   // directories whose entries were rolled back
	LastTornBytes     int64 // bytes of the torn write that were kept
	LastDuration      time.Duration
}

// server is a mounted lazyfs; it runs in the child process (see child.go).
type server struct {
	backing    string
	mountpoint string
	stash      string
	opts       Options

	mu     sync.Mutex // guards everything below, and orders model updates with backing I/O
	server *fuse.Server
	files  map[uint64]*fileRec          // regular files changed since their last fsync
	dirs   map[uint64]map[string]dirent // durable entries of directories changed since their last fsync
	last   *lastWrite                   // last unsynced WRITE, for TornLastWrite
	open   map[*fileHandle]string       // open file handles and their paths
	rng    *rand.Rand
	stats  Stats

	rmu    sync.Mutex
	rules  []*injection
	nextID int
}

// mountServer mounts mountpoint as a loopback of backing in this process.
func mountServer(backing, mountpoint string, opts Options) (*server, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, err
	}
	stash := opts.StashDir
	if stash == "" {
		stash = strings.TrimRight(backing, "/") + ".lazyfs"
	}
	if stash, err = filepath.Abs(stash); err != nil {
		return nil, err
	}
	if stash == backing || strings.HasPrefix(stash, backing+"/") {
		return nil, fmt.Errorf("lazyfs: stash dir %s is inside backing dir %s", stash, backing)
	}
	f := &server{
		backing:    backing,
		mountpoint: mountpoint,
		stash:      stash,
		opts:       opts,
		rng:        rand.New(rand.NewPCG(opts.Seed, 0x6c617a79)),
	}
	if err := f.resetStash(); err != nil {
		return nil, err
	}
	bst, err := lstat(backing)
	if err != nil {
		return nil, err
	}
	sst, err := lstat(stash)
	if err != nil {
		return nil, err
	}
	if bst.Dev != sst.Dev {
		return nil, fmt.Errorf("lazyfs: stash dir %s is not on the filesystem of %s", stash, backing)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mountLocked(); err != nil {
		os.RemoveAll(stash)
		return nil, err
	}
	return f, nil
}

// Stats returns a snapshot of the counters.
func (f *server) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Unmount unmounts without a power loss: the backing directory keeps the
// current state, as after a clean shutdown. It fails, leaving the mount in
// place, if files on the mount are still open. Unmount of an unmounted FS
// is a no-op.
func (f *server) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.server == nil {
		return nil
	}
	if err := f.unmountLocked(); err != nil {
		return err
	}
	return os.RemoveAll(f.stash)
}

// Close is Unmount, except that if the mount is busy it detaches it lazily
// (MNT_DETACH) so that no mount is left behind, and reports the busy error.
func (f *server) Close() error {
	err := f.Unmount()
	if err == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if derr := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); derr != nil {
		return errors.Join(err, fmt.Errorf("lazyfs: lazy detach of %s: %w", f.mountpoint, derr))
	}
	f.server = nil
	os.RemoveAll(f.stash)
	return err
}

func (f *server) resetStash() error {
	if err := os.RemoveAll(f.stash); err != nil {
		return err
	}
	return os.Mkdir(f.stash, 0o700)
}

// mountLocked starts a fresh FUSE server over f.backing with an empty model.
func (f *server) mountLocked() error {
	f.files = map[uint64]*fileRec{}
	f.dirs = map[uint64]map[string]dirent{}
	f.open = map[*fileHandle]string{}
	f.last = nil

	st, err := lstat(f.backing)
	if err != nil {
		return err
	}
	root := &fs.LoopbackRoot{Path: f.backing, Dev: st.Dev}
	//lint:ignore SA1019 NodeWrapChilder wraps only children; the loopback root's NewNode makes every node ours in one place.
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, lfs: f}
	}
	rn := &node{LoopbackNode: fs.LoopbackNode{RootData: root}, lfs: f}
	root.RootNode = rn

	zero := time.Duration(0)
	server, err := fs.Mount(f.mountpoint, rn, &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            f.backing,
			Name:              "lazyfs",
			Debug:             f.opts.Debug,
			// No writeback cache (go-fuse never asks for it): every
			// write(2) reaches Write before it returns.
		},
	})
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.mountpoint, err)
	}
	f.server = server
	return nil
}

// unmountLocked unmounts, first waiting up to 2s for the kernel to release
// handles of files the caller already closed. On failure it names the files
// still open.
func (f *server) unmountLocked() error {
	for deadline := time.Now().Add(2 * time.Second); len(f.open) > 0 && time.Now().Before(deadline); {
		f.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		f.mu.Lock()
	}
	if err := f.server.Unmount(); err != nil {
		var busy []string
		for _, p := range f.open {
			busy = append(busy, p)
		}
		slices.Sort(busy)
		if len(busy) == 0 {
			return fmt.Errorf("lazyfs: unmount %s: %w (no file open through lazyfs: a process may have its cwd or a mount inside)", f.mountpoint, err)
		}
		return fmt.Errorf("lazyfs: unmount %s: %w: still open: %s (close them first)", f.mountpoint, err, strings.Join(busy, ", "))
	}
	f.server = nil
	f.open = map[*fileHandle]string{}
	return nil
}
