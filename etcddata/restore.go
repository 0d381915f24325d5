// Restoring a snapshot into the data directory: Restore, its directory
// states, the etcdutl staging restore and the durable renames it relies on.

package etcddata

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"go.uber.org/zap"

	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// etcdInitialClusterToken is the --initial-cluster-token a restore
// bootstraps with. manifest's rendered etcd pod sets none, so etcd used its
// default, which is this.
const etcdInitialClusterToken = "etcd-cluster"

// etcdRestoreSuffix names the staging directory a restore builds beside
// the data directory.
const etcdRestoreSuffix = ".stratum-restore"

// RevisionBump is how far a restore moves etcd's revision past the
// backup's: more revisions than a cluster writes between a pre-upgrade
// backup and its rollback, as etcd's disaster recovery guide suggests.
const RevisionBump = 1_000_000_000

// Restore makes st.Etcd.DataDir hold the data of backup b, with the
// membership rebuilt from st (member st.Etcd.MemberName, st.Etcd.InitialCluster,
// token "etcd-cluster", etcd's default, which the rendered pod keeps). The
// caller has already stopped etcd.
//
// Only a single-member cluster is restored: members (the cluster's member
// count, which the caller read from its member list) and b.Members are 1. Otherwise it returns ErrMultiMember, wrapped in an
// explanation of why and what to do instead, and touches nothing.
//
// The restore goes through directory states, so a call interrupted at any
// point (SIGKILL, power loss) is finished by calling again with the same
// arguments:
//
//   - data dir present, asideDir absent: the backup is verified
//     (Verify), "<dataDir>.stratum-restore" is removed if a
//     previous attempt left it, and etcdutl's restore writes the backup
//     there (hash check on); every file and directory of it is fsynced and
//     it gets the data dir's mode and owner. Then the data dir is renamed
//     to asideDir and the staging directory to the data dir, each rename
//     made durable by fsyncing the parents. A failure before the first
//     rename leaves the data dir untouched and removes the staging dir.
//   - data dir absent, asideDir present, staging present: the staging dir
//     is complete (the data dir is moved aside only after it is); it is
//     renamed to the data dir.
//   - data dir and asideDir present: already done; a leftover staging dir
//     is removed and nil returned.
//
// Any other state (no data dir and no asideDir, or asideDir without the
// staging dir) is reported, naming every directory, and nothing is changed.
// The previous data stays at asideDir for the caller to remove once the
// rollback is final. ctx is checked between the steps; etcdutl's restore
// itself runs to completion. The data dir must be a real directory, not a
// symlink or a mount point (rename cannot move those); such a data dir is
// refused before anything changes.
func Restore(ctx context.Context, st *nodestate.NodeState, b *Backup, asideDir string, members int) error {
	dataDir := filepath.Clean(st.Etcd.DataDir)
	staging := dataDir + etcdRestoreSuffix
	fail := func(err error) error { return fmt.Errorf("etcd restore into %s: %w", dataDir, err) }
	if b == nil {
		return fail(fmt.Errorf("%w: no etcd backup given", ErrInvalid))
	}
	if err := checkSingleMember(members, b); err != nil {
		return fail(err)
	}
	if asideDir == "" {
		return fail(errors.New("no directory given to move the current data dir aside to"))
	}
	asideDir = filepath.Clean(asideDir)
	if asideDir == dataDir || asideDir == staging || !filepath.IsAbs(asideDir) {
		return fail(fmt.Errorf("aside directory %q must be an absolute path other than the data dir and %s", asideDir, staging))
	}
	live, err := dirState(dataDir)
	if err != nil {
		return fail(err)
	}
	aside, err := dirState(asideDir)
	if err != nil {
		return fail(err)
	}
	staged, err := dirState(staging)
	if err != nil {
		return fail(err)
	}
	switch {
	case live && aside:
		if staged {
			if err := removeAllDurable(staging); err != nil {
				return fail(err)
			}
		}
		// The process that did it may have died before the renames were
		// made durable.
		if err := syncParents(dataDir, asideDir); err != nil {
			return fail(err)
		}
		slog.Info("etcd restore already done", "dataDir", dataDir, "aside", asideDir)
		return nil
	case !live && aside && staged:
		if err := checkRestoredDir(staging); err != nil {
			return fail(fmt.Errorf("finishing an interrupted restore: %w; the previous data is at %s", err, asideDir))
		}
		if err := renameDurable(staging, dataDir); err != nil {
			return fail(fmt.Errorf("finishing an interrupted restore: %w; the previous data is at %s", err, asideDir))
		}
		slog.Info("etcd restore finished after an interruption", "dataDir", dataDir, "aside", asideDir, "backup", b.Path)
		return nil
	case !live && aside:
		return fail(fmt.Errorf("the data dir is missing, the previous data is at %s, and the restored copy %s is gone: "+
			"rename %s back to %s and retry the restore", asideDir, staging, asideDir, dataDir))
	case !live:
		return fail(fmt.Errorf("the data dir does not exist (nor %s): there is no etcd data to roll back; check etcd.dataDir in the node state", asideDir))
	}

	// live, not yet aside: do everything.
	if err := checkMovable(dataDir); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if err := Verify(b); err != nil {
		return fail(err)
	}
	if staged {
		if err := removeAllDurable(staging); err != nil {
			return fail(fmt.Errorf("remove the leftover of an earlier attempt: %w", err))
		}
	}
	if err := restoreStaging(st, b, dataDir, staging); err != nil {
		os.RemoveAll(staging)
		return fail(fmt.Errorf("%w; the data dir is unchanged", err))
	}
	if err := ctx.Err(); err != nil {
		os.RemoveAll(staging)
		return fail(fmt.Errorf("%w; the data dir is unchanged", err))
	}
	etcdRestoreStep("staged")
	if err := os.Rename(dataDir, asideDir); err != nil {
		os.RemoveAll(staging)
		return fail(fmt.Errorf("move the current data aside: %w; the data dir is unchanged", err))
	}
	if err := syncParents(dataDir, asideDir); err != nil {
		return fail(fmt.Errorf("%w; the previous data is at %s, the restored data at %s: retry the restore", err, asideDir, staging))
	}
	etcdRestoreStep("aside")
	if err := renameDurable(staging, dataDir); err != nil {
		return fail(fmt.Errorf("move the restored data in: %w; the previous data is at %s, the restored data at %s: retry the restore", err, asideDir, staging))
	}
	slog.Info("etcd data restored", "dataDir", dataDir, "aside", asideDir, "backup", b.Path, "revision", b.Revision)
	return nil
}

// etcdRestoreHook, when set by tests, runs at each durable intermediate
// state of a restore: "staged" (staging complete, data dir not yet moved)
// and "aside" (data dir moved aside, staging not yet renamed). The crash
// tests SIGKILL the process there.
var etcdRestoreHook func(step string)

func etcdRestoreStep(step string) {
	if etcdRestoreHook != nil {
		etcdRestoreHook(step)
	}
}

// restoreStaging runs etcdutl's restore of b into staging, then makes the
// result durable and gives it dataDir's mode and owner.
func restoreStaging(st *nodestate.NodeState, b *Backup, dataDir, staging string) error {
	peerURLs := memberPeerURLs(st.Etcd.InitialCluster, st.Etcd.MemberName)
	if len(peerURLs) == 0 {
		return fmt.Errorf("initialCluster %q does not list member %q", st.Etcd.InitialCluster, st.Etcd.MemberName)
	}
	err := etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{
		SnapshotPath:        b.Path,
		Name:                st.Etcd.MemberName,
		OutputDataDir:       staging,
		PeerURLs:            peerURLs,
		InitialCluster:      st.Etcd.InitialCluster,
		InitialClusterToken: etcdInitialClusterToken,
		SkipHashCheck:       false,
		// The apiserver's watch cache and every client's informers hold
		// revisions newer than the backup's. Without a bump new writes
		// would reuse those revision numbers and watchers would miss them;
		// marking the bumped revision compacted makes every watcher relist
		// (etcd's and Kubernetes' restore guides).
		RevisionBump:  RevisionBump,
		MarkCompacted: true,
	})
	if err != nil {
		return fmt.Errorf("etcdutl restore of %s into %s: %w", b.Path, staging, err)
	}
	if err := matchOwnerAndMode(dataDir, staging); err != nil {
		return err
	}
	if err := syncTree(staging); err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(staging))
}

// memberPeerURLs returns the peer URLs initialCluster lists for member.
func memberPeerURLs(initialCluster, member string) []string {
	var out []string
	for _, part := range strings.Split(initialCluster, ",") {
		name, u, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && name == member {
			out = append(out, u)
		}
	}
	return out
}

// matchOwnerAndMode gives the tree at dst the owner of directory src, and
// dst itself src's permission bits, so etcd running as the data dir's
// owner can open the restored data.
func matchOwnerAndMode(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.Chmod(dst, fi.Mode().Perm()); err != nil {
		return err
	}
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid, gid := int(sys.Uid), int(sys.Gid)
	if uid == os.Geteuid() && gid == os.Getegid() {
		return nil
	}
	return filepath.WalkDir(dst, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// syncTree fsyncs every regular file and directory under root, root
// included.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", p, err)
		}
		return nil
	})
}

// renameDurable renames from to to and fsyncs both parent directories.
func renameDurable(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return syncParents(from, to)
}

// syncParents fsyncs the parent directories of a and b.
func syncParents(a, b string) error {
	if err := durable.SyncDir(filepath.Dir(b)); err != nil {
		return err
	}
	if filepath.Dir(a) != filepath.Dir(b) {
		return durable.SyncDir(filepath.Dir(a))
	}
	return nil
}

// removeAllDurable removes the tree at path and fsyncs its parent.
func removeAllDurable(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(path))
}
