// Package etcddata backs up and restores the local etcd member's data: a
// consistent snapshot taken through the client's snapshot API before an
// upgrade changes etcd's image, and its restore into the member's data
// directory when a rollback needs it (single-member clusters only). The HA
// work adds membership here.
package etcddata

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Backup describes one etcd data snapshot file. It is JSON-encodable:
// the upgrade engine journals it and hands it back to Restore.
type Backup struct {
	// Path is the snapshot file: etcd's bbolt database followed by the
	// sha256 of the database that etcd's snapshot stream appends.
	Path string `json:"path"`
	// SHA256 and Size are of the whole file as written (trailer included).
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Revision is the member's header revision read right before the
	// snapshot was requested: the snapshot holds every write up to at least
	// this revision.
	Revision int64 `json:"revision"`
	// MemberID is the ID (hex) of the member that served the snapshot.
	MemberID string `json:"memberID"`
	// Members is the cluster size when the snapshot was taken.
	Members int `json:"members"`
	// MemberIDs are the IDs (hex) of every member when the snapshot was
	// taken, sorted; a refused multi-member restore lists them.
	MemberIDs []string `json:"memberIDs,omitempty"`
	// Version is the etcd server version that served the snapshot.
	Version string    `json:"version"`
	Taken   time.Time `json:"taken"`
}

// ClientConfig is how to reach one etcd member.
type ClientConfig struct {
	// Endpoint is the member's client URL. An https URL is dialled with
	// TLS, verified against CAFile, presenting CertFile/KeyFile.
	Endpoint string
	CAFile   string
	CertFile string
	KeyFile  string
	// DialTimeout bounds reaching the member and its first answers (the
	// status and member list read before the snapshot); zero means
	// DefaultDialTimeout. The snapshot stream itself is bounded only by
	// the caller's context.
	DialTimeout time.Duration
}

// DefaultDialTimeout is the DialTimeout Endpoint sets.
const DefaultDialTimeout = 5 * time.Second

// etcdInitialClusterToken is the --initial-cluster-token a restore
// bootstraps with. manifest's rendered etcd pod sets none, so etcd used its
// default, which is this.
const etcdInitialClusterToken = "etcd-cluster"

// etcdRestoreSuffix names the staging directory a restore builds beside
// the data directory.
const etcdRestoreSuffix = ".stratum-restore"

// ErrMultiMember is returned (wrapped in an explanation) by Restore
// when the cluster has, or had when the backup was taken, more than one
// member: restoring one member's snapshot is refused.
// ErrInvalid wraps every reason a backup is refused: damaged, truncated,
// or not the file its record describes.
var ErrInvalid = errors.New("invalid etcd backup")

var ErrMultiMember = errors.New("etcd restore refused: multi-member cluster")

// Endpoint is how to reach the local member described by st: its
// loopback client listener, https://127.0.0.1:<ports.etcdClient> (or
// [::1] for an IPv6 advertise address, as manifest renders
// --listen-client-urls), with the etcd CA <pkiDir>/etcd/ca.crt and the
// client certificate <pkiDir>/etcd/healthcheck-client.{crt,key}. That is the
// pair kubeadm's own etcd client uses (kubeadm upgrade, member add/remove)
// and kubeadm documents for etcdctl on the node; it is signed by the etcd
// CA, which is all etcd's --client-cert-auth asks for.
func Endpoint(st *nodestate.NodeState) ClientConfig {
	host := "127.0.0.1"
	if ip := net.ParseIP(st.AdvertiseAddress); ip != nil && ip.To4() == nil {
		host = "::1"
	}
	etcdPKI := filepath.Join(st.PKIDir, "etcd")
	return ClientConfig{
		Endpoint:    "https://" + net.JoinHostPort(host, strconv.Itoa(st.Ports.EtcdClient)),
		CAFile:      filepath.Join(etcdPKI, "ca.crt"),
		CertFile:    filepath.Join(etcdPKI, "healthcheck-client.crt"),
		KeyFile:     filepath.Join(etcdPKI, "healthcheck-client.key"),
		DialTimeout: DefaultDialTimeout,
	}
}

// tlsConfig is the client TLS configuration for an https endpoint, nil for
// an http one.
func (c ClientConfig) tlsConfig() (*tls.Config, error) {
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("endpoint %q is not an http(s)://host:port URL", c.Endpoint)
	}
	if u.Scheme == "http" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("etcd CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate %s / key %s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Take takes a consistent point-in-time snapshot of the one member at
// cfg.Endpoint through etcd's Maintenance.Snapshot API and stores it at
// path.
//
// Right before the snapshot it reads the member's status (revision, member
// ID, server version) and the member list, from the same member. The stream
// is written to a hidden temporary file in path's directory while its sha256
// is computed; the file is fsynced, re-read and re-hashed, and accepted only
// if the re-read sha256 equals the streamed one and etcd's own trailer (the
// sha256 of the database that etcd appends to the stream) matches the
// database. Only then is it renamed over path and the directory fsynced: an
// existing file at path is replaced only by a complete, verified snapshot,
// and on any error path is unchanged and the temporary file is removed.
// Temporary files an earlier, killed backup to the same path left are
// removed first. The file has mode 0600.
//
// ctx bounds the whole backup; cfg.DialTimeout bounds reaching the member.
// Errors name the endpoint and say what to check.
func Take(ctx context.Context, cfg ClientConfig, path string) (*Backup, error) {
	path = filepath.Clean(path)
	fail := func(err error) error {
		return fmt.Errorf("etcd backup of %s to %s: %w", cfg.Endpoint, path, err)
	}
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		return nil, fail(err)
	}
	dialTimeout := cfg.DialTimeout
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cfg.Endpoint},
		TLS:         tlsCfg,
		DialTimeout: dialTimeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fail(fmt.Errorf("client: %w", err))
	}
	defer cli.Close()

	b, err := etcdMemberInfo(ctx, cli, cfg, dialTimeout)
	if err != nil {
		return nil, fail(err)
	}
	b.Path = path
	b.Taken = time.Now().UTC()

	dir := filepath.Dir(path)
	tmpPrefix := "." + filepath.Base(path) + ".tmp-"
	if stale, _ := filepath.Glob(filepath.Join(dir, tmpPrefix+"*")); len(stale) > 0 {
		for _, p := range stale { // an earlier backup to path was killed mid-stream
			os.Remove(p)
		}
	}
	f, err := os.CreateTemp(dir, tmpPrefix)
	if err != nil {
		return nil, fail(err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		if !renamed {
			f.Close()
			os.Remove(tmp)
		}
	}()
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return nil, fail(fmt.Errorf("snapshot request: %w (check that etcd is healthy: etcdctl endpoint status)", err))
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), resp.Snapshot)
	resp.Snapshot.Close()
	if err != nil {
		return nil, fail(fmt.Errorf("snapshot stream broke after %d bytes: %w", n, err))
	}
	if err := f.Sync(); err != nil {
		return nil, fail(err)
	}
	if err := f.Close(); err != nil {
		return nil, fail(err)
	}
	streamed := hex.EncodeToString(h.Sum(nil))
	size, onDisk, err := hashEtcdSnapshot(tmp)
	if err != nil {
		return nil, fail(err)
	}
	if size != n || onDisk != streamed {
		return nil, fail(fmt.Errorf("file %s re-read as %d bytes sha256 %s, but %d bytes sha256 %s were written: the disk does not hold what was written", tmp, size, onDisk, n, streamed))
	}
	b.Size, b.SHA256 = size, streamed
	if err := os.Rename(tmp, path); err != nil {
		return nil, fail(err)
	}
	renamed = true
	if err := durable.SyncDir(dir); err != nil {
		return nil, fail(err)
	}
	slog.Info("etcd backup taken", "endpoint", cfg.Endpoint, "path", path, "size", b.Size,
		"revision", b.Revision, "member", b.MemberID, "members", b.Members, "version", b.Version)
	return b, nil
}

// etcdMemberInfo reads the member's status and the member list, each
// bounded by dialTimeout within ctx.
func etcdMemberInfo(ctx context.Context, cli *clientv3.Client, cfg ClientConfig, dialTimeout time.Duration) (*Backup, error) {
	unreachable := func(what string, err error) error {
		return fmt.Errorf("%s: %w (check that etcd is running and listening on %s, and that client certificate %s and CA %s belong to its --trusted-ca-file)",
			what, err, cfg.Endpoint, cfg.CertFile, cfg.CAFile)
	}
	sctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	status, err := cli.Status(sctx, cfg.Endpoint)
	if err != nil {
		return nil, unreachable("status", err)
	}
	members, err := cli.MemberList(sctx)
	if err != nil {
		return nil, unreachable("member list", err)
	}
	b := &Backup{
		Revision: status.Header.Revision,
		MemberID: fmt.Sprintf("%x", status.Header.MemberId),
		Members:  len(members.Members),
		Version:  status.Version,
	}
	for _, m := range members.Members {
		b.MemberIDs = append(b.MemberIDs, fmt.Sprintf("%x", m.ID))
	}
	sort.Strings(b.MemberIDs)
	return b, nil
}

// hashEtcdSnapshot reads the snapshot file at path once and returns its
// size and sha256. It fails, wrapping ErrInvalid, unless the file carries
// etcd's integrity trailer: a size of 32 more than a multiple of 512, the
// last 32 bytes being the sha256 of everything before them.
func hashEtcdSnapshot(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	if !fi.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%w: etcd snapshot %s is not a regular file (mode %s)", ErrInvalid, path, fi.Mode().Type())
	}
	size := fi.Size()
	if size%512 != sha256.Size {
		return 0, "", fmt.Errorf("%w: etcd snapshot %s is %d bytes, not a database plus etcd's 32-byte sha256 trailer: truncated or not an etcd snapshot", ErrInvalid, path, size)
	}
	whole, db := sha256.New(), sha256.New()
	if _, err := io.CopyN(io.MultiWriter(whole, db), f, size-sha256.Size); err != nil {
		return 0, "", fmt.Errorf("read etcd snapshot %s: %w", path, err)
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		return 0, "", fmt.Errorf("read etcd snapshot %s: %w", path, err)
	}
	whole.Write(trailer)
	if got := db.Sum(nil); string(got) != string(trailer) {
		return 0, "", fmt.Errorf("%w: etcd snapshot %s: database sha256 %x does not match the trailer %x etcd wrote: the file is corrupt", ErrInvalid, path, got, trailer)
	}
	return size, hex.EncodeToString(whole.Sum(nil)), nil
}

// Verify re-reads the file at b.Path and checks that it is a
// regular file with b's size and sha256 and that etcd's own sha256 trailer
// matches the database. Every mismatch wraps ErrInvalid. It changes
// nothing.
func Verify(b *Backup) error {
	if b == nil || b.Path == "" {
		return fmt.Errorf("%w: no etcd backup given", ErrInvalid)
	}
	fi, err := os.Lstat(b.Path)
	if err != nil {
		return fmt.Errorf("etcd backup %s: %w", b.Path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: etcd backup %s is not a regular file (mode %s)", ErrInvalid, b.Path, fi.Mode().Type())
	}
	if fi.Size() != b.Size {
		return fmt.Errorf("%w: etcd backup %s is %d bytes, %d were recorded: truncated or replaced after it was taken", ErrInvalid, b.Path, fi.Size(), b.Size)
	}
	size, sum, err := hashEtcdSnapshot(b.Path)
	if err != nil {
		return fmt.Errorf("etcd backup %s: %w", b.Path, err)
	}
	if size != b.Size || sum != b.SHA256 {
		return fmt.Errorf("%w: etcd backup %s has sha256 %s, %s was recorded: changed after it was taken", ErrInvalid, b.Path, sum, b.SHA256)
	}
	return nil
}

// Restore makes st.Etcd.DataDir hold the data of backup b, with the
// membership rebuilt from st (member st.Etcd.MemberName, st.Etcd.InitialCluster,
// token "etcd-cluster", etcd's default, which the rendered pod keeps). The
// caller has already stopped etcd.
//
// Only a single-member cluster is restored: st.SingleMember() and
// b.Members == 1. Otherwise it returns ErrMultiMember, wrapped in an
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
func Restore(ctx context.Context, st *nodestate.NodeState, b *Backup, asideDir string) error {
	dataDir := filepath.Clean(st.Etcd.DataDir)
	staging := dataDir + etcdRestoreSuffix
	fail := func(err error) error { return fmt.Errorf("etcd restore into %s: %w", dataDir, err) }
	if b == nil {
		return fail(fmt.Errorf("%w: no etcd backup given", ErrInvalid))
	}
	if err := checkSingleMember(st, b); err != nil {
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

// checkSingleMember refuses, wrapping ErrMultiMember, a restore for a
// cluster that is or was multi-member.
func checkSingleMember(st *nodestate.NodeState, b *Backup) error {
	if st.SingleMember() && b.Members == 1 {
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
	return fmt.Errorf("%w: the node state's initialCluster is %q and %s. "+
		"Restoring one member's snapshot gives that member a new cluster ID and member ID: it would split from the other members, "+
		"and the cluster would lose quorum and diverge. What to do instead: to repair only this member, remove it "+
		"(etcdctl member remove <id>), add it back (etcdctl member add), and start it on an empty data dir with "+
		"--initial-cluster-state=existing so it syncs from the others; to roll the whole cluster back to one snapshot, "+
		"stop etcd on every member and restore that same snapshot on each of them by hand, following etcd's disaster "+
		"recovery guide (https://etcd.io/docs/v3.6/op-guide/recovery/)",
		ErrMultiMember, st.Etcd.InitialCluster, taken)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// RevisionBump is how far a restore moves etcd's revision past the
// backup's: more revisions than a cluster writes between a pre-upgrade
// backup and its rollback, as etcd's disaster recovery guide suggests.
const RevisionBump = 1_000_000_000

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
// b, asideDir) can restore: the cluster is a single member, the backup is
// intact (Verify), and the directories are in a state the restore
// starts from or resumes. The engine calls it before it stops etcd, so a
// restore that cannot happen does not take etcd down first.
func CheckRestore(st *nodestate.NodeState, b *Backup, asideDir string) error {
	if b == nil {
		return fmt.Errorf("%w: no etcd backup given", ErrInvalid)
	}
	if err := checkSingleMember(st, b); err != nil {
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
