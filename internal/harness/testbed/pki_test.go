package testbed

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

func TestGeneratePKILayout(t *testing.T) {
	dir := t.TempDir()
	if err := GeneratePKI(dir, "cp-1", "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
		"apiserver-etcd-client.crt", "apiserver-etcd-client.key", "front-proxy-ca.crt", "front-proxy-ca.key", "front-proxy-client.crt",
		"front-proxy-client.key", "sa.key", "sa.pub", "etcd/ca.crt", "etcd/ca.key", "etcd/server.crt", "etcd/server.key",
		"etcd/peer.crt", "etcd/peer.key", "etcd/healthcheck-client.crt", "etcd/healthcheck-client.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if want := os.FileMode(0o644); filepath.Ext(f) == ".key" {
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v, want 0600", f, fi.Mode().Perm())
			}
		} else if fi.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", f, fi.Mode().Perm(), want)
		}
	}
}

// The cluster's nodes share their authorities and each has its own
// leaves: node 2's etcd peer certificate is signed by node 1's etcd CA and
// names node 2's address and name.
func TestIssueNodeSharesCAs(t *testing.T) {
	cas, err := NewCAs()
	if err != nil {
		t.Fatal(err)
	}
	d1, d2 := t.TempDir(), t.TempDir()
	if err := cas.IssueNode(d1, "node-1", "127.0.0.11"); err != nil {
		t.Fatal(err)
	}
	if err := cas.IssueNode(d2, "node-2", "127.0.0.12"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.crt", "ca.key", "etcd/ca.crt", "etcd/ca.key", "front-proxy-ca.crt", "sa.key", "sa.pub"} {
		a, _ := os.ReadFile(filepath.Join(d1, f))
		b, _ := os.ReadFile(filepath.Join(d2, f))
		if len(a) == 0 || string(a) != string(b) {
			t.Errorf("%s differs between the nodes (or is empty)", f)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(d1, "etcd/ca.crt")))
	peer := readCert(t, filepath.Join(d2, "etcd/peer.crt"))
	if _, err := peer.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("node 2's peer certificate against node 1's etcd CA: %v", err)
	}
	if err := peer.VerifyHostname("127.0.0.12"); err != nil {
		t.Error(err)
	}
	if err := peer.VerifyHostname("node-2"); err != nil {
		t.Error(err)
	}
	if err := peer.VerifyHostname("127.0.0.11"); err == nil {
		t.Error("node 2's peer certificate names node 1's address")
	}
	if readCert(t, filepath.Join(d1, "etcd/peer.crt")).Equal(peer) {
		t.Error("both nodes have the same peer certificate")
	}

	for _, bad := range [][3]string{{"", "n", "127.0.0.1"}, {t.TempDir(), "", "127.0.0.1"}, {t.TempDir(), "n", "not-an-ip"}} {
		if err := cas.IssueNode(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("IssueNode(%q, %q, %q) succeeded", bad[0], bad[1], bad[2])
		}
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
