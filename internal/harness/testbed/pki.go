package testbed

import (
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
	"slices"
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
// apiserver-etcd-client.crt reaches etcd. Its authorities are new, shared
// with no other node: it is NewCAs followed by CAs.IssueNode.
func GeneratePKI(dir, nodeName, advertise string) error {
	cas, err := NewCAs()
	if err != nil {
		return err
	}
	return cas.IssueNode(dir, nodeName, advertise)
}

// CAs are the authorities and the service-account key pair the nodes of
// one cluster share: the cluster CA, the etcd CA, the front-proxy CA and
// sa.key/sa.pub. They live in memory until IssueNode writes them.
type CAs struct {
	ca, etcd, frontProxy *authority
	sa                   *ecdsa.PrivateKey
}

// NewCAs generates a new set of authorities (ECDSA P-256, valid ten years)
// and a new service-account key.
func NewCAs() (*CAs, error) {
	var c CAs
	var err error
	if c.ca, err = newCA("kubernetes"); err != nil {
		return nil, err
	}
	if c.etcd, err = newCA("etcd-ca"); err != nil {
		return nil, err
	}
	if c.frontProxy, err = newCA("front-proxy-ca"); err != nil {
		return nil, err
	}
	if c.sa, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, fmt.Errorf("pki: sa key: %w", err)
	}
	return &c, nil
}

// IssueNode writes the layout GeneratePKI describes under dir: the shared
// authorities' certificates and keys, sa.key/sa.pub, and every leaf
// certificate new, signed by them, for node nodeName advertising
// advertise. Nodes issued from the same CAs trust each other: an etcd
// peer certificate of one is accepted by every other member, and a client
// certificate of one by every node's etcd and apiserver. The serving
// certificates carry advertise as an IP SAN when it is an IP address
// (127.0.0.11 too; 127.0.0.1 and ::1 are always there), and each of also
// (addresses the node's connections may come from). It refuses an empty
// dir or node name and an advertise address (or one of also) that is not
// an IP.
func (c *CAs) IssueNode(dir, nodeName, advertise string, also ...string) error {
	if dir == "" || nodeName == "" {
		return fmt.Errorf("pki: directory %q and node name %q must not be empty", dir, nodeName)
	}
	adv := net.ParseIP(advertise)
	if adv == nil {
		return fmt.Errorf("pki %s: advertise address %q is not an IP address", dir, advertise)
	}
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o755); err != nil {
		return fmt.Errorf("pki %s: %w", dir, err)
	}
	for _, a := range []struct {
		ca   *authority
		name string
	}{{c.ca, "ca"}, {c.etcd, "etcd/ca"}, {c.frontProxy, "front-proxy-ca"}} {
		if err := a.ca.write(dir, a.name); err != nil {
			return err
		}
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if !slices.ContainsFunc(ips, adv.Equal) {
		ips = append(ips, adv)
	}
	for _, a := range also {
		ip := net.ParseIP(a)
		if ip == nil {
			return fmt.Errorf("pki %s: address %q is not an IP address", dir, a)
		}
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	dns := []string{"localhost", nodeName}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	leaves := []struct {
		ca    *authority
		name  string
		cn    string
		org   []string
		usage []x509.ExtKeyUsage
		sans  bool
	}{
		{c.ca, "apiserver", "kube-apiserver", nil, server, true},
		{c.ca, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"kubeadm:cluster-admins"}, client, false},
		{c.frontProxy, "front-proxy-client", "front-proxy-client", nil, client, false},
		{c.etcd, "etcd/server", nodeName, nil, both, true},
		{c.etcd, "etcd/peer", nodeName, nil, both, true},
		{c.etcd, "etcd/healthcheck-client", "kube-etcd-healthcheck-client", nil, client, false},
		{c.etcd, "apiserver-etcd-client", "kube-apiserver-etcd-client", nil, client, false},
		{c.ca, "controller-manager", "system:kube-controller-manager", nil, client, false},
		{c.ca, "scheduler", "system:kube-scheduler", nil, client, false},
		{c.ca, "admin", "kubernetes-admin", []string{"system:masters"}, client, false},
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
	if err := writeKey(filepath.Join(dir, "sa.key"), c.sa); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&c.sa.PublicKey)
	if err != nil {
		return fmt.Errorf("pki: sa.pub: %w", err)
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub, 0o644)
}

type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func newCA(cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki CA %s: %w", cn, err)
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
		return nil, fmt.Errorf("pki CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki CA %s: %w", cn, err)
	}
	return &authority{cert: cert, key: key}, nil
}

// write writes the authority's certificate and key as dir/name.crt and .key.
func (a *authority) write(dir, name string) error {
	if err := writePEM(filepath.Join(dir, name+".crt"), "CERTIFICATE", a.cert.Raw, 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), a.key)
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
