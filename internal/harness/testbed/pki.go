package testbed

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// GeneratePKI writes kubeadm's PKI layout under dir for a node advertising
// advertise: the cluster CA (ca.crt/key), apiserver serving and client
// certificates, the service-account key pair (sa.key/pub), the front-proxy
// CA and client, and the etcd CA with etcd/server, etcd/peer and
// etcd/healthcheck-client, plus apiserver-etcd-client signed by it, and the
// client certificates kubeadm embeds in the kubeconfigs, here files of
// their own: controller-manager (system:kube-controller-manager),
// scheduler (system:kube-scheduler) and admin (kubernetes-admin in
// system:masters), signed by the cluster CA. Every
// key is ECDSA P-256. Serving certificates carry the SANs 127.0.0.1, ::1,
// localhost, the node name and advertise. Keys are 0600, certificates 0644.
// The set is real and consistent: etcd runs on it, and a client holding
// apiserver-etcd-client.crt reaches etcd.
func GeneratePKI(dir, nodeName, advertise string) error {
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o755); err != nil {
		return fmt.Errorf("pki %s: %w", dir, err)
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip := net.ParseIP(advertise); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	dns := []string{"localhost", nodeName}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}

	ca, err := newCA(dir, "ca", "kubernetes")
	if err != nil {
		return err
	}
	etcdCA, err := newCA(dir, "etcd/ca", "etcd-ca")
	if err != nil {
		return err
	}
	fpCA, err := newCA(dir, "front-proxy-ca", "front-proxy-ca")
	if err != nil {
		return err
	}
	leaves := []struct {
		ca    *authority
		name  string
		cn    string
		org   []string
		usage []x509.ExtKeyUsage
		sans  bool
	}{
		{ca, "apiserver", "kube-apiserver", nil, server, true},
		{ca, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"}, client, false},
		{fpCA, "front-proxy-client", "front-proxy-client", nil, client, false},
		{etcdCA, "etcd/server", nodeName, nil, both, true},
		{etcdCA, "etcd/peer", nodeName, nil, both, true},
		{etcdCA, "etcd/healthcheck-client", "kube-etcd-healthcheck-client", nil, client, false},
		{etcdCA, "apiserver-etcd-client", "kube-apiserver-etcd-client", nil, client, false},
		{ca, "controller-manager", "system:kube-controller-manager", nil, client, false},
		{ca, "scheduler", "system:kube-scheduler", nil, client, false},
		{ca, "admin", "kubernetes-admin", []string{"system:masters"}, client, false},
	}
	for _, l := range leaves {
		tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: l.cn, Organization: l.org}, ExtKeyUsage: l.usage,
			KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment}
		if l.sans {
			tmpl.IPAddresses, tmpl.DNSNames = ips, dns
			if l.name == "apiserver" {
				tmpl.DNSNames = append(tmpl.DNSNames, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
			}
		}
		if err := l.ca.issue(dir, l.name, tmpl); err != nil {
			return err
		}
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: sa key: %w", err)
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), sa); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return fmt.Errorf("pki: sa.pub: %w", err)
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644)
}

type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func newCA(dir, name, cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki %s: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki %s: %w", name, err)
	}
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	if err := writeKey(filepath.Join(dir, name+".key"), key); err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key}, nil
}

func (a *authority) issue(dir, name string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki %s: %w", name, err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(365*24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return fmt.Errorf("pki %s: %w", name, err)
	}
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki %s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
