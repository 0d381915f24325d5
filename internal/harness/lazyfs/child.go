package lazyfs

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

// The FUSE server runs in a child process: the test binary re-executed with
// childEnv set, which init turns into the server before any test runs.
//
// It cannot run in the test process: a thread that page-faults on an mmap
// of the mount (bbolt reads through mmap) blocks inside the kernel until the
// server answers, and the Go runtime cannot stop that thread for a garbage
// collection, so a server in the same process deadlocks at the next GC.
const childEnv = "LAZYFS_SERVER_CHILD"

// request and response are the control protocol, JSON over a socketpair
// the parent passes as fd 3. One request at a time.
type request struct {
	Cmd        string // mount, powerloss, stats, inject, counts, clear, unmount, close
	Backing    string
	Mountpoint string
	Opts       Options
	Rule       Rule
	ID         int
}

type response struct {
	Err   string
	Stats Stats
	ID    int
	Seen  int64
	Fired int64
}

func init() {
	if os.Getenv(childEnv) == "" {
		return
	}
	os.Exit(serveChild())
}

// serveChild mounts and serves requests until told to unmount, or until the
// parent goes away (EOF), in which case it unmounts (lazily if busy).
func serveChild() int {
	// The parent's death, not a signal sent to its process group, ends us:
	// we must outlive it long enough to unmount.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	conn, err := net.FileConn(os.NewFile(3, "lazyfs-control"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "lazyfs child: %v\n", err)
		return 2
	}
	dec, enc := json.NewDecoder(conn), json.NewEncoder(conn)
	var srv *server
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			if srv != nil {
				srv.Close()
			}
			return 0
		}
		var resp response
		done := false
		switch {
		case req.Cmd == "mount" && srv == nil:
			srv, err = mountServer(req.Backing, req.Mountpoint, req.Opts)
			done = err != nil
		case srv == nil:
			err = fmt.Errorf("lazyfs child: %s before mount", req.Cmd)
		case req.Cmd == "powerloss":
			err = srv.PowerLoss()
		case req.Cmd == "stats":
			resp.Stats = srv.Stats()
		case req.Cmd == "inject":
			resp.ID, err = srv.addRule(req.Rule)
		case req.Cmd == "counts":
			resp.Seen, resp.Fired = srv.counts(req.ID)
		case req.Cmd == "clear":
			srv.clearRules()
		case req.Cmd == "unmount":
			err = srv.Unmount()
			done = err == nil
		case req.Cmd == "close":
			err = srv.Close()
			done = true
		default:
			err = fmt.Errorf("lazyfs child: unknown command %q", req.Cmd)
		}
		if err != nil {
			resp.Err = err.Error()
		}
		if err := enc.Encode(resp); err != nil && srv != nil {
			srv.Close()
			return 2
		}
		if done {
			return 0
		}
	}
}
