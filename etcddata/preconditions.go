// Preconditions of a restore, checked before anything changes: single
// member, data dir state and movability (CheckDataDir, CheckRestore).

package etcddata

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// CheckDataDir reports whether st's etcd data dir can be restored by
// Restore should a rollback need it: it must be a real directory (not a
// symlink, not a mount point: the restore swaps directories by rename), or
// not exist yet. It changes nothing. Call it before an upgrade that changes
// etcd, so that a rollback is not found impossible halfway.
func CheckDataDir(st *nodestate.NodeState) error {
	dataDir := filepath.Clean(st.Etcd.DataDir)
	live, err := dirState(dataDir)
	if err != nil {
		return fmt.Errorf("etcd data dir: %w", err)
	}
	if !live {
		return nil
	}
	if err := checkMovable(dataDir); err != nil {
		return fmt.Errorf("etcd data dir: %w", err)
	}
	return nil
}

// CheckRestore reports, changing nothing, whether Restore(ctx, st,
// b, asideDir, members) can restore: the cluster is a single member (members,
// the live cluster's member count, and the backup's), the backup is
// intact (Verify), and the directories are in a state the restore
// starts from or resumes. The engine calls it before it stops etcd, so a
// restore that cannot happen does not take etcd down first.
func CheckRestore(st *nodestate.NodeState, b *Backup, asideDir string, members int) error {
	if b == nil {
		return fmt.Errorf("%w: no etcd backup given", ErrInvalid)
	}
	if err := checkSingleMember(members, b); err != nil {
		return err
	}
	dataDir := filepath.Clean(st.Etcd.DataDir)
	live, err := dirState(dataDir)
	if err != nil {
		return err
	}
	aside, err := dirState(filepath.Clean(asideDir))
	if err != nil {
		return err
	}
	if aside {
		return nil // an interrupted or finished restore: Restore resumes it
	}
	if !live {
		return fmt.Errorf("the etcd data dir %s does not exist: there is no etcd data to roll back; check etcd.dataDir in the node state", dataDir)
	}
	if err := checkMovable(dataDir); err != nil {
		return err
	}
	return Verify(b)
}

// checkSingleMember refuses, wrapping ErrMultiMember, a restore for a
// cluster that is (members, read from its member list by the caller) or
// was (the backup's) multi-member.
func checkSingleMember(members int, b *Backup) error {
	if members == 1 && b.Members == 1 {
		return nil
	}
	ids := "not recorded"
	if len(b.MemberIDs) > 0 {
		ids = strings.Join(b.MemberIDs, ", ")
	}
	taken := fmt.Sprintf("the backup was taken from member %s of a %d-member cluster (member IDs: %s)", orUnknown(b.MemberID), b.Members, ids)
	if b.Members < 1 {
		taken = "the backup does not record the cluster size"
	}
	return fmt.Errorf("%w: the cluster has %d member(s) and %s. "+
		"Restoring one member's snapshot gives that member a new cluster ID and member ID: it would split from the other members, "+
		"and the cluster would lose quorum and diverge. What to do instead: to repair only this member, remove it "+
		"(etcdctl member remove <id>), add it back (etcdctl member add), and start it on an empty data dir with "+
		"--initial-cluster-state=existing so it syncs from the others; to roll the whole cluster back to one snapshot, "+
		"stop etcd on every member and restore that same snapshot on each of them by hand, following etcd's disaster "+
		"recovery guide (https://etcd.io/docs/v3.6/op-guide/recovery/)",
		ErrMultiMember, members, taken)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// dirState reports whether path exists as a directory; anything else there
// is an error.
func dirState(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return false, fmt.Errorf("%s is a symbolic link: restore by hand (rename cannot move the directory it points to)", path)
	}
	if !fi.IsDir() {
		return false, fmt.Errorf("%s exists but is not a directory (mode %s): move it away", path, fi.Mode().Type())
	}
	return true, nil
}

// checkMovable refuses a data dir that is a mount point: rename(2) cannot
// move it.
func checkMovable(dataDir string) error {
	var d, p syscall.Stat_t
	if err := syscall.Stat(dataDir, &d); err != nil {
		return fmt.Errorf("stat %s: %w", dataDir, err)
	}
	if err := syscall.Stat(filepath.Dir(dataDir), &p); err != nil {
		return fmt.Errorf("stat %s: %w", filepath.Dir(dataDir), err)
	}
	if d.Dev != p.Dev {
		return fmt.Errorf("%s is a mount point; the restore swaps directories by rename and cannot move it: restore by hand (etcdutl snapshot restore into an empty directory, then move its member/ directory into the data dir)", dataDir)
	}
	return nil
}

// checkRestoredDir checks that dir looks like a finished etcdutl restore.
func checkRestoredDir(dir string) error {
	if fi, err := os.Lstat(filepath.Join(dir, "member", "snap", "db")); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s has no member/snap/db: not a restored etcd data dir", dir)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "member", "wal")); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s has no member/wal: not a restored etcd data dir", dir)
	}
	return nil
}
