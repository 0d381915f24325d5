// Taking and verifying etcd snapshots: the Backup record, how to reach the
// member (ClientConfig, Endpoint), Take and Verify.

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
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"go.uber.org/zap"

	clientv3 "go.etcd.io/etcd/client/v3"

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

// ErrInvalid wraps every reason a backup is refused: damaged, truncated,
// or not the file its record describes.
var ErrInvalid = errors.New("invalid etcd backup")

// ErrMultiMember is returned (wrapped in an explanation) by Restore
// when the cluster has, or had when the backup was taken, more than one
// member: restoring one member's snapshot is refused.
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

// dial is a client of the member at c alone, and the dial timeout it
// uses (DefaultDialTimeout when c sets none); the caller closes it.
func (c ClientConfig) dial(ctx context.Context) (*clientv3.Client, time.Duration, error) {
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, 0, err
	}
	dialTimeout := c.DialTimeout
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoint}, TLS: tlsCfg, DialTimeout: dialTimeout, Context: ctx, Logger: zap.NewNop()})
	if err != nil {
		return nil, 0, fmt.Errorf("client: %w", err)
	}
	return cli, dialTimeout, nil
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
	cli, dialTimeout, err := cfg.dial(ctx)
	if err != nil {
		return nil, fail(err)
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

// TLS is the client TLS configuration c describes: nil for an http
// endpoint; for https, the CA and client certificate read now.
func (c ClientConfig) TLS() (*tls.Config, error) { return c.tlsConfig() }
