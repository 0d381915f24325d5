package etcddata

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// --- test bed: PKI, ports, real etcd processes ---

// etcdBinary returns the path of a real etcd binary of the given minor
// version ("3.5", "3.6"), built by internal/harness/etcdbuild (cached).
func etcdBinary(t *testing.T, minor string) string {
	t.Helper()
	bin, err := etcdbuild.Binary(minor)
	if err != nil {
		t.Fatalf("etcd %s binary: %v", minor, err)
	}
	return bin
}

// freePort returns a loopback TCP port nothing listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// etcdNodeState is a single-member node state on free loopback ports with
// fresh PKI, its data dir under a temp dir.
func etcdNodeState(t testing.TB) *nodestate.NodeState {
	t.Helper()
	root := t.TempDir()
	pki := filepath.Join(root, "pki")
	if err := testbed.GeneratePKI(pki, "node1", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	client, peer := freePort(t), freePort(t)
	for peer == client {
		peer = freePort(t)
	}
	return &nodestate.NodeState{
		APIVersion: nodestate.APIVersion, Kind: nodestate.Kind,
		NodeName: "node1", AdvertiseAddress: "127.0.0.1",
		Etcd: nodestate.EtcdMember{
			MemberName:          "node1",
			InitialCluster:      "node1=https://127.0.0.1:" + strconv.Itoa(peer),
			InitialClusterState: "new",
			DataDir:             filepath.Join(root, "var", "lib", "etcd"),
		},
		PKIDir: pki,
		Ports:  nodestate.Ports{EtcdClient: client, EtcdPeer: peer},
	}
}

// etcdProc is a real etcd process in its own process group.
type etcdProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

// startEtcd starts etcd binary bin for the member st describes, the way
// manifest renders its flags (TLS on client and peer listeners, client
// certificate auth), and waits until it answers a status request. The
// process group is killed at cleanup, whatever the test's outcome.
func startEtcd(t testing.TB, bin string, st *nodestate.NodeState) *etcdProc {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(st.Etcd.DataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(st.PKIDir, "etcd")
	client := "https://127.0.0.1:" + strconv.Itoa(st.Ports.EtcdClient)
	peer := memberPeerURLs(st.Etcd.InitialCluster, st.Etcd.MemberName)[0]
	args := []string{
		"--name=" + st.Etcd.MemberName,
		"--data-dir=" + st.Etcd.DataDir,
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + st.Etcd.InitialCluster,
		"--initial-cluster-state=" + st.Etcd.InitialClusterState,
		"--cert-file=" + filepath.Join(pki, "server.crt"),
		"--key-file=" + filepath.Join(pki, "server.key"),
		"--trusted-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--client-cert-auth=true",
		"--peer-cert-file=" + filepath.Join(pki, "peer.crt"),
		"--peer-key-file=" + filepath.Join(pki, "peer.key"),
		"--peer-trusted-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--peer-client-cert-auth=true",
	}
	logf, err := os.CreateTemp(t.TempDir(), "etcd-*.log")
	if err != nil {
		t.Fatal(err)
	}
	p := &etcdProc{t: t, log: logf.Name(), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	t.Cleanup(p.kill)
	p.waitReady(st)
	return p
}

func (p *etcdProc) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (p *etcdProc) waitReady(st *nodestate.NodeState) {
	p.t.Helper()
	cfg := Endpoint(st)
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			p.t.Fatalf("etcd exited before it answered on %s: %v\n%s", cfg.Endpoint, p.err, p.logTail())
		default:
		}
		cli := etcdTestClient(p.t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, last = cli.Status(ctx, cfg.Endpoint)
		cancel()
		cli.Close()
		if last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("etcd on %s did not answer a status request within 60s (last error: %v)\n%s", cfg.Endpoint, last, p.logTail())
}

// stop stops etcd gracefully (SIGTERM), killing it if it does not exit in
// 30s.
func (p *etcdProc) stop() {
	p.t.Helper()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.kill()
		p.t.Fatalf("etcd did not exit within 30s of SIGTERM\n%s", p.logTail())
	}
}

func (p *etcdProc) kill() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.t.Errorf("etcd pid %d did not exit within 10s of SIGKILL", p.cmd.Process.Pid)
	}
}

func etcdTestClient(t testing.TB, cfg ClientConfig) *clientv3.Client {
	t.Helper()
	tlsCfg, err := cfg.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cfg.Endpoint}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func etcdCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// putKeys puts k<from>..k<to> = v<i> and returns the last write's revision.
func putKeys(t *testing.T, cli *clientv3.Client, from, to int) int64 {
	t.Helper()
	var rev int64
	for i := from; i <= to; i++ {
		resp, err := cli.Put(etcdCtx(t), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
		if err != nil {
			t.Fatalf("put k%d: %v", i, err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

// changeAfterBackup makes the writes a restore must undo: k11..k20 added,
// k1 deleted, k2 overwritten.
func changeAfterBackup(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	putKeys(t, cli, 11, 20)
	if _, err := cli.Delete(etcdCtx(t), "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(etcdCtx(t), "k2", "changed"); err != nil {
		t.Fatal(err)
	}
}

// etcdKeys returns every key under "k" with its value.
func etcdKeys(t *testing.T, cli *clientv3.Client) map[string]string {
	t.Helper()
	resp, err := cli.Get(etcdCtx(t), "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func wantSnapshotted() map[string]string {
	m := map[string]string{}
	for i := 1; i <= 10; i++ {
		m[fmt.Sprintf("k%d", i)] = fmt.Sprintf("v%d", i)
	}
	return m
}

// assertRestoredKeys starts bin on st's data dir and checks that exactly
// the snapshotted keys k1..k10 are there with their values.
func assertRestoredKeys(t *testing.T, bin, minor string, st *nodestate.NodeState, b *Backup) {
	t.Helper()
	p := startEtcd(t, bin, st)
	cli := etcdTestClient(t, Endpoint(st))
	defer cli.Close()
	if got, want := etcdKeys(t, cli), wantSnapshotted(); !reflect.DeepEqual(got, want) {
		t.Errorf("after restore etcd holds %v, want exactly %v", got, want)
	}
	status, err := cli.Status(etcdCtx(t), Endpoint(st).Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(status.Version, minor+".") {
		t.Errorf("etcd on the restored data dir is version %s, want %s.x", status.Version, minor)
	}
	if status.Header.Revision < b.Revision {
		t.Errorf("restored revision %d < backup revision %d", status.Header.Revision, b.Revision)
	}
	members, err := cli.MemberList(etcdCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 || members.Members[0].Name != st.Etcd.MemberName {
		t.Errorf("restored cluster members %v, want only %s", members.Members, st.Etcd.MemberName)
	}
	p.stop()
}

// tree lists every entry under the given roots with its type, size and
// content hash, to show that a refused operation changed nothing.
func tree(t *testing.T, roots ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil
			}
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			v := fi.Mode().String()
			if d.Type().IsRegular() {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				sum := sha256.Sum256(b)
				v += " " + hex.EncodeToString(sum[:])
			}
			out[p] = v
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, fi.Mode().Perm())
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Lstat(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// --- backup, change, restore, start: the rollback the engine does ---

// TestEtcdBackupRestoreRoundTrip backs up a real etcd member holding
// k1..k10, changes the data, stops etcd, restores, starts etcd on the
// restored data dir and finds exactly k1..k10 with their values.
//
// The 3.5 case is the engine's rollback exactly: back up a 3.5 member,
// upgrade it to 3.6 (3.6 runs on the same data dir and takes the later
// writes), stop, restore the 3.5 backup with this binary's 3.6 restore
// library, and start etcd 3.5 on the result.
func TestEtcdBackupRestoreRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		from, upgradeTo string
	}{
		{from: "3.6"},
		{from: "3.5", upgradeTo: "3.6"},
	} {
		name := "etcd" + tc.from
		if tc.upgradeTo != "" {
			name += "-upgraded-to-" + tc.upgradeTo
		}
		t.Run(name, func(t *testing.T) {
			bin := etcdBinary(t, tc.from)
			upBin := bin
			if tc.upgradeTo != "" {
				upBin = etcdBinary(t, tc.upgradeTo)
			}
			st := etcdNodeState(t)
			cfg := Endpoint(st)
			p := startEtcd(t, bin, st)
			cli := etcdTestClient(t, cfg)
			rev := putKeys(t, cli, 1, 10)

			path := filepath.Join(t.TempDir(), "backups", "txn1.etcd.db")
			os.MkdirAll(filepath.Dir(path), 0o700)
			b, err := Take(etcdCtx(t), cfg, path)
			if err != nil {
				t.Fatal(err)
			}
			status, err := cli.Status(etcdCtx(t), cfg.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			if b.Path != path || b.Revision != rev || b.Members != 1 || b.MemberID != fmt.Sprintf("%x", status.Header.MemberId) ||
				!reflect.DeepEqual(b.MemberIDs, []string{b.MemberID}) || !strings.HasPrefix(b.Version, tc.from+".") || b.Taken.IsZero() {
				t.Errorf("backup record %+v: want path %s, revision %d, 1 member %x, version %s.x", b, path, rev, status.Header.MemberId, tc.from)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size() != b.Size || fi.Mode().Perm() != 0o600 {
				t.Errorf("backup file size %d mode %v, record says %d, want mode 0600", fi.Size(), fi.Mode().Perm(), b.Size)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) > 0 {
				t.Errorf("temporary files left beside the backup: %v", left)
			}
			if err := Verify(b); err != nil {
				t.Fatal(err)
			}
			// The journal stores the record as JSON; what comes back must restore.
			raw, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			var journaled Backup
			if err := json.Unmarshal(raw, &journaled); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&journaled, b) {
				t.Fatalf("JSON round trip changed the record: %+v -> %+v", b, &journaled)
			}

			if tc.upgradeTo != "" { // the upgrade: the new etcd takes over the data dir
				cli.Close()
				p.stop()
				p = startEtcd(t, upBin, st)
				cli = etcdTestClient(t, cfg)
				if status, err := cli.Status(etcdCtx(t), cfg.Endpoint); err != nil || !strings.HasPrefix(status.Version, tc.upgradeTo+".") {
					t.Fatalf("upgraded etcd status %v, %v: want version %s.x", status, err, tc.upgradeTo)
				}
			}
			changeAfterBackup(t, cli)
			if got := etcdKeys(t, cli); len(got) != 19 || got["k2"] != "changed" {
				t.Fatalf("before the restore etcd holds %v, want k2..k20 with k2 changed", got)
			}
			cli.Close()
			p.stop()

			aside := st.Etcd.DataDir + ".stratum-pre-rollback-txn1"
			if err := Restore(etcdCtx(t), st, &journaled, aside, 1); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(st.Etcd.DataDir); err != nil {
				t.Fatal(err)
			} else if fi.Mode().Perm() != 0o700 {
				t.Errorf("restored data dir has mode %v, want 0700 like the original", fi.Mode().Perm())
			}
			if !exists(t, filepath.Join(aside, "member", "snap", "db")) || exists(t, st.Etcd.DataDir+etcdRestoreSuffix) {
				t.Errorf("after restore: want the previous data at %s and no staging dir", aside)
			}
			// A second call (the engine resuming after a crash) does nothing.
			before := tree(t, filepath.Dir(st.Etcd.DataDir))
			if err := Restore(etcdCtx(t), st, &journaled, aside, 1); err != nil {
				t.Fatalf("second restore: %v", err)
			}
			if after := tree(t, filepath.Dir(st.Etcd.DataDir)); !reflect.DeepEqual(before, after) {
				t.Errorf("second restore changed the directories")
			}
			assertRestoredKeys(t, bin, tc.from, st, b)
		})
	}
}

// --- a shared backup for the failure tests ---

// etcdFixture is a stopped member's data dir that holds writes made after
// its backup, and that backup.
type etcdFixture struct {
	bin     string
	st      *nodestate.NodeState
	backup  *Backup
	dataDir string
}

func newEtcdFixture(t *testing.T) *etcdFixture {
	t.Helper()
	bin := etcdBinary(t, "3.6")
	st := etcdNodeState(t)
	p := startEtcd(t, bin, st)
	cli := etcdTestClient(t, Endpoint(st))
	defer cli.Close()
	putKeys(t, cli, 1, 10)
	b, err := Take(etcdCtx(t), Endpoint(st), filepath.Join(t.TempDir(), "fixture.etcd.db"))
	if err != nil {
		t.Fatal(err)
	}
	changeAfterBackup(t, cli)
	p.stop()
	return &etcdFixture{bin: bin, st: st, backup: b, dataDir: st.Etcd.DataDir}
}

// clone gives a subtest its own copy of the live data dir and the backup.
func (f *etcdFixture) clone(t *testing.T) (*nodestate.NodeState, *Backup) {
	t.Helper()
	st := f.st.Clone()
	st.Etcd.DataDir = filepath.Join(t.TempDir(), "var", "lib", "etcd")
	copyTree(t, f.dataDir, st.Etcd.DataDir)
	b := *f.backup
	b.Path = filepath.Join(t.TempDir(), "txn.etcd.db")
	raw, err := os.ReadFile(f.backup.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return st, &b
}

// TestEtcdBackupIntegrity: a backup file that was truncated, extended or
// modified after it was taken is refused by Verify and by
// Restore, and the refused restore leaves the data dir untouched.
func TestEtcdBackupIntegrity(t *testing.T) {
	f := newEtcdFixture(t)
	withTrailer := func(db []byte) []byte {
		sum := sha256.Sum256(db)
		return append(append([]byte{}, db...), sum[:]...)
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, b *Backup)
	}{
		{"truncated", func(t *testing.T, b *Backup) {
			os.Truncate(b.Path, b.Size-4096)
		}},
		{"cut to a sector boundary", func(t *testing.T, b *Backup) {
			os.Truncate(b.Path, b.Size-sha256.Size) // the trailer is gone
		}},
		{"byte flipped in the database", func(t *testing.T, b *Backup) {
			raw, _ := os.ReadFile(b.Path)
			raw[len(raw)/2] ^= 0xff
			os.WriteFile(b.Path, raw, 0o600)
		}},
		{"database modified and etcd's trailer recomputed", func(t *testing.T, b *Backup) {
			raw, _ := os.ReadFile(b.Path)
			db := raw[:len(raw)-sha256.Size]
			db[len(db)/2] ^= 0xff
			os.WriteFile(b.Path, withTrailer(db), 0o600)
		}},
		{"trailer corrupt, record made from the corrupt file", func(t *testing.T, b *Backup) {
			raw, _ := os.ReadFile(b.Path)
			raw[len(raw)-1] ^= 0xff
			os.WriteFile(b.Path, raw, 0o600)
			sum := sha256.Sum256(raw)
			b.SHA256 = hex.EncodeToString(sum[:])
		}},
		{"bytes appended", func(t *testing.T, b *Backup) {
			fh, _ := os.OpenFile(b.Path, os.O_WRONLY|os.O_APPEND, 0)
			fh.Write(make([]byte, 512))
			fh.Close()
		}},
		{"replaced by a symlink", func(t *testing.T, b *Backup) {
			real := b.Path + ".real"
			os.Rename(b.Path, real)
			os.Symlink(real, b.Path)
		}},
		{"missing", func(t *testing.T, b *Backup) {
			os.Remove(b.Path)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := f.clone(t)
			if err := Verify(b); err != nil {
				t.Fatalf("undamaged copy: %v", err)
			}
			tc.damage(t, b)
			err := Verify(b)
			if err == nil {
				t.Fatal("Verify accepted a damaged backup")
			}
			if tc.name != "missing" && !errors.Is(err, ErrInvalid) {
				t.Errorf("Verify: %v does not wrap ErrInvalid", err)
			}
			t.Logf("verify: %v", err)
			parent := filepath.Dir(st.Etcd.DataDir)
			before := tree(t, parent)
			aside := st.Etcd.DataDir + ".aside"
			err = Restore(etcdCtx(t), st, b, aside, 1)
			if err == nil {
				t.Fatal("Restore restored a damaged backup")
			}
			if tc.name != "missing" && !errors.Is(err, ErrInvalid) {
				t.Errorf("Restore: %v does not wrap ErrInvalid", err)
			}
			if after := tree(t, parent); !reflect.DeepEqual(before, after) {
				t.Errorf("refused restore changed %s", parent)
			}
		})
	}
	t.Run("the undamaged copy restores, with the data dir's owner and mode", func(t *testing.T) {
		st, b := f.clone(t)
		const uid, gid = 4321, 4322 // etcd running as its own user, as CIS asks
		chown := os.Geteuid() == 0
		if chown {
			if err := os.Chown(st.Etcd.DataDir, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(st.Etcd.DataDir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := Restore(etcdCtx(t), st, b, st.Etcd.DataDir+".aside", 1); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(st.Etcd.DataDir); err != nil {
			t.Fatal(err)
		} else if fi.Mode().Perm() != 0o750 {
			t.Errorf("restored data dir has mode %v, want the original's 0750", fi.Mode().Perm())
		}
		if chown {
			filepath.WalkDir(st.Etcd.DataDir, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				fi, _ := d.Info()
				if sys := fi.Sys().(*syscall.Stat_t); sys.Uid != uid || sys.Gid != gid {
					t.Errorf("restored %s is owned by %d:%d, want the data dir's owner %d:%d", p, sys.Uid, sys.Gid, uid, gid)
				}
				return nil
			})
		}
		assertRestoredKeys(t, f.bin, "3.6", st, b)
	})
}

// TestEtcdRestoreRefusesMultiMember: a multi-member cluster (the member
// count the caller read from its member list), or a backup
// taken from a multi-member cluster, is refused with ErrMultiMember and an
// explanation, and nothing is touched.
func TestEtcdRestoreRefusesMultiMember(t *testing.T) {
	st := etcdNodeState(t)
	if err := os.MkdirAll(filepath.Join(st.Etcd.DataDir, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.Etcd.DataDir, "member", "snap", "db"), []byte("live"), 0o600); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "b.etcd.db")
	os.WriteFile(backup, []byte("not read: refused before"), 0o600)
	for _, tc := range []struct {
		name    string
		members int
		b       Backup
	}{
		{"two members live and in the backup", 2, Backup{Path: backup, Members: 2, MemberID: "8e9e05c52164694d", MemberIDs: []string{"8e9e05c52164694d", "91bc3c398fb3c146"}}},
		{"two members live, backup says one", 2, Backup{Path: backup, Members: 1, MemberID: "8e9e05c52164694d"}},
		{"one member live, backup from a three-member cluster", 1, Backup{Path: backup, Members: 3, MemberID: "a", MemberIDs: []string{"a", "b", "c"}}},
		{"backup without a member count", 1, Backup{Path: backup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := filepath.Dir(st.Etcd.DataDir)
			before := tree(t, parent, backup)
			err := Restore(etcdCtx(t), st, &tc.b, st.Etcd.DataDir+".aside", tc.members)
			if !errors.Is(err, ErrMultiMember) {
				t.Fatalf("got %v, want ErrMultiMember", err)
			}
			msg := err.Error()
			for _, want := range append([]string{"cluster ID", "quorum", "member remove", "disaster recovery", fmt.Sprintf("the cluster has %d member(s)", tc.members)}, tc.b.MemberIDs...) {
				if !strings.Contains(msg, want) {
					t.Errorf("error does not mention %q: %s", want, msg)
				}
			}
			if after := tree(t, parent, backup); !reflect.DeepEqual(before, after) {
				t.Errorf("refused restore changed something")
			}
		})
	}
}

// TestEtcdRestoreConvergesAfterCrash: a restore SIGKILLed at each durable
// intermediate state, or interrupted during etcdutl's restore (a partial
// staging dir), is finished by a second Restore call, and etcd started
// on the result holds exactly the snapshotted keys.
func TestEtcdRestoreConvergesAfterCrash(t *testing.T) {
	f := newEtcdFixture(t)
	for _, tc := range []struct {
		name  string
		crash func(t *testing.T, st *nodestate.NodeState, b *Backup, aside string)
		// live, aside, staging: the directory state the crash left
		want [3]bool
	}{
		{"partial staging dir left by an earlier attempt", func(t *testing.T, st *nodestate.NodeState, b *Backup, aside string) {
			staging := st.Etcd.DataDir + etcdRestoreSuffix
			os.MkdirAll(filepath.Join(staging, "member", "snap"), 0o700)
			os.WriteFile(filepath.Join(staging, "member", "snap", "db"), []byte("half a database"), 0o600)
		}, [3]bool{true, false, true}},
		{"killed with staging complete, data dir not moved", func(t *testing.T, st *nodestate.NodeState, b *Backup, aside string) {
			crashRestoreChild(t, st, b, aside, "staged")
		}, [3]bool{true, false, true}},
		{"killed with the data dir moved aside, staging not renamed", func(t *testing.T, st *nodestate.NodeState, b *Backup, aside string) {
			crashRestoreChild(t, st, b, aside, "aside")
		}, [3]bool{false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := f.clone(t)
			aside := st.Etcd.DataDir + ".stratum-pre-rollback-txn"
			staging := st.Etcd.DataDir + etcdRestoreSuffix
			liveBefore := tree(t, st.Etcd.DataDir)
			tc.crash(t, st, b, aside)
			if got := [3]bool{exists(t, st.Etcd.DataDir), exists(t, aside), exists(t, staging)}; got != tc.want {
				t.Fatalf("state after the crash (live, aside, staging) = %v, want %v", got, tc.want)
			}
			if err := Restore(etcdCtx(t), st, b, aside, 1); err != nil {
				t.Fatalf("resumed restore: %v", err)
			}
			if got := [3]bool{exists(t, st.Etcd.DataDir), exists(t, aside), exists(t, staging)}; got != [3]bool{true, true, false} {
				t.Fatalf("state after the resumed restore (live, aside, staging) = %v, want live and aside only", got)
			}
			// The aside dir is the live data as it was, byte for byte.
			asideNow := map[string]string{}
			for p, v := range tree(t, aside) {
				asideNow[st.Etcd.DataDir+strings.TrimPrefix(p, aside)] = v
			}
			if !reflect.DeepEqual(asideNow, liveBefore) {
				t.Errorf("the data set aside is not the data dir as it was")
			}
			assertRestoredKeys(t, f.bin, "3.6", st, b)
		})
	}
	t.Run("refused: data dir and staging both missing", func(t *testing.T) {
		st, b := f.clone(t)
		aside := st.Etcd.DataDir + ".aside"
		if err := os.Rename(st.Etcd.DataDir, aside); err != nil {
			t.Fatal(err)
		}
		before := tree(t, filepath.Dir(st.Etcd.DataDir))
		err := Restore(etcdCtx(t), st, b, aside, 1)
		if err == nil || !strings.Contains(err.Error(), "rename "+aside+" back") {
			t.Fatalf("got %v, want a refusal that says to rename the aside dir back", err)
		}
		if after := tree(t, filepath.Dir(st.Etcd.DataDir)); !reflect.DeepEqual(before, after) {
			t.Errorf("refused restore changed something")
		}
	})
}

// crashRestoreChild runs Restore in a child process (this test binary)
// that SIGKILLs itself when the restore reaches step.
func crashRestoreChild(t *testing.T, st *nodestate.NodeState, b *Backup, aside, step string) {
	t.Helper()
	args, err := json.Marshal(crashArgs{State: st, Backup: b, Aside: aside, Step: step})
	if err != nil {
		t.Fatal(err)
	}
	argsFile := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(argsFile, args, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestEtcdRestoreCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "STRATUM_ETCD_RESTORE_CRASH_ARGS="+argsFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatalf("restore child did not reach step %q within 60s:\n%s", step, out.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("restore child was not killed at step %q: %v\n%s", step, err, out.String())
	}
}

type crashArgs struct {
	State  *nodestate.NodeState
	Backup *Backup
	Aside  string
	Step   string
}

// TestEtcdRestoreCrashChild is the child process of crashRestoreChild; it
// does nothing in a normal test run.
func TestEtcdRestoreCrashChild(t *testing.T) {
	argsFile := os.Getenv("STRATUM_ETCD_RESTORE_CRASH_ARGS")
	if argsFile == "" {
		t.Skip("child process of TestEtcdRestoreConvergesAfterCrash")
	}
	raw, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	var a crashArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	etcdRestoreHook = func(step string) {
		if step == a.Step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	err = Restore(context.Background(), a.State, a.Backup, a.Aside, 1)
	t.Fatalf("restore returned (%v) without reaching step %q", err, a.Step)
}

// --- unreachable members ---

// TestEtcdBackupUnreachable: a backup from an endpoint where no etcd
// answers fails within the context's deadline, names the endpoint, and
// leaves an existing backup at the path as it was, with no temporary file.
func TestEtcdBackupUnreachable(t *testing.T) {
	st := etcdNodeState(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never speaks TLS
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tc := range []struct {
		name     string
		endpoint string
	}{
		{"nothing listening", "https://127.0.0.1:" + strconv.Itoa(freePort(t))},
		{"listener that never answers", "https://" + silent.Addr().String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Endpoint(st)
			cfg.Endpoint = tc.endpoint
			cfg.DialTimeout = time.Minute // the context's deadline is the shorter bound
			dir := t.TempDir()
			path := filepath.Join(dir, "txn.etcd.db")
			if err := os.WriteFile(path, []byte("previous backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			const deadline = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := Take(ctx, cfg, path)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(deadline + 20*time.Second):
				t.Fatalf("Take against %s still running 20s after its %v deadline", tc.endpoint, deadline)
			}
			if err == nil {
				t.Fatal("backup succeeded against an unreachable endpoint")
			}
			if !strings.Contains(err.Error(), tc.endpoint) || !strings.Contains(err.Error(), "check that etcd is running") {
				t.Errorf("error does not name the endpoint and what to check: %v", err)
			}
			t.Logf("error: %v", err)
			if got, _ := os.ReadFile(path); string(got) != "previous backup" {
				t.Errorf("failed backup changed the existing file: %q", got)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("failed backup left files: %v", entries)
			}
		})
	}
}

// TestEtcdBackupReplacesExisting: a second backup to the same path
// replaces the first only with a complete, verified file, and a temporary
// file a killed earlier backup left is cleaned up.
func TestEtcdBackupReplacesExisting(t *testing.T) {
	bin := etcdBinary(t, "3.6")
	st := etcdNodeState(t)
	startEtcd(t, bin, st)
	cli := etcdTestClient(t, Endpoint(st))
	defer cli.Close()
	putKeys(t, cli, 1, 3)
	dir := t.TempDir()
	path := filepath.Join(dir, "txn.etcd.db")
	first, err := Take(etcdCtx(t), Endpoint(st), path)
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, ".txn.etcd.db.tmp-123")
	os.WriteFile(stale, []byte("killed mid-stream"), 0o600)
	rev := putKeys(t, cli, 4, 5)
	second, err := Take(etcdCtx(t), Endpoint(st), path)
	if err != nil {
		t.Fatal(err)
	}
	if second.Revision != rev || second.Revision <= first.Revision {
		t.Errorf("second backup revision %d, want %d (first %d)", second.Revision, rev, first.Revision)
	}
	if err := Verify(second); err != nil {
		t.Fatal(err)
	}
	if err := Verify(first); !errors.Is(err, ErrInvalid) {
		t.Errorf("the first record against the replaced file: %v, want ErrInvalid", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("want only the backup in %s, got %v", dir, entries)
	}
}

func TestEtcdEndpoint(t *testing.T) {
	st := &nodestate.NodeState{AdvertiseAddress: "10.0.0.5", PKIDir: "/etc/kubernetes/pki", Ports: nodestate.Ports{EtcdClient: 2379}}
	want := ClientConfig{
		Endpoint:    "https://127.0.0.1:2379",
		CAFile:      "/etc/kubernetes/pki/etcd/ca.crt",
		CertFile:    "/etc/kubernetes/pki/etcd/healthcheck-client.crt",
		KeyFile:     "/etc/kubernetes/pki/etcd/healthcheck-client.key",
		DialTimeout: DefaultDialTimeout,
	}
	if got := Endpoint(st); got != want {
		t.Errorf("Endpoint = %+v, want %+v", got, want)
	}
	st.AdvertiseAddress, st.Ports.EtcdClient = "fd00::5", 12379
	if got := Endpoint(st).Endpoint; got != "https://[::1]:12379" {
		t.Errorf("IPv6 endpoint = %s, want https://[::1]:12379", got)
	}
}

// BenchmarkEtcdBackupRestore reports the time of Take and Restore
// (verification, etcdutl restore, fsyncs, renames) for a member holding
// 16 MiB of values in 16384 keys.
func BenchmarkEtcdBackupRestore(b *testing.B) {
	bin, err := etcdbuild.Binary("3.6")
	if err != nil {
		b.Fatal(err)
	}
	st := etcdNodeState(b)
	p := startEtcd(b, bin, st)
	cli := etcdTestClient(b, Endpoint(st))
	defer cli.Close()
	val := strings.Repeat("x", 1024)
	ctx := context.Background()
	for i := 0; i < 16384; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("bench/%05d", i), val); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	var bk *Backup
	b.Run("backup", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if bk, err = Take(ctx, Endpoint(st), filepath.Join(dir, "bench.etcd.db")); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(bk.Size)/(1<<20), "MiB")
	})
	p.stop()
	b.Run("restore", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			aside := fmt.Sprintf("%s.aside-%d", st.Etcd.DataDir, i)
			if err := Restore(ctx, st, bk, aside, 1); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(aside)
			b.StartTimer()
		}
	})
}

// TestEtcdRestoreRefusesSymlinkDataDir: a data dir that is a symlink is
// refused before anything moves (renaming the link would leave the real
// data where it is and put the restored data on the link's filesystem).
func TestEtcdRestoreRefusesSymlinkDataDir(t *testing.T) {
	st := etcdNodeState(t)
	real := filepath.Join(t.TempDir(), "disk", "etcd")
	if err := os.MkdirAll(filepath.Join(real, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(st.Etcd.DataDir), 0o700)
	if err := os.Symlink(real, st.Etcd.DataDir); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "b.etcd.db")
	os.WriteFile(backup, []byte("refused before it is read"), 0o600)
	before := tree(t, filepath.Dir(st.Etcd.DataDir), filepath.Dir(real))
	err := Restore(etcdCtx(t), st, &Backup{Path: backup, Members: 1}, st.Etcd.DataDir+".aside", 1)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("got %v, want a refusal naming the symlink", err)
	}
	if after := tree(t, filepath.Dir(st.Etcd.DataDir), filepath.Dir(real)); !reflect.DeepEqual(before, after) {
		t.Errorf("refused restore changed something")
	}
}
