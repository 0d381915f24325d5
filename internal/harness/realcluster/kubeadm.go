package realcluster

// kubeadm init on the first node and kubeadm join --control-plane on the
// others, each run inside its node by the real kubeadm of Version, with
// the configuration an operator would write: the load balancer as the
// control-plane endpoint, uploaded certificates, no add-ons (their images
// are not built here), and the kubelet settings these machines need.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/kubeapi"
)

// KubeadmTimeout bounds one kubeadm init or join.
const KubeadmTimeout = 10 * time.Minute

// SkippedPhases are the init phases left out: the CoreDNS and kube-proxy
// add-ons, whose images are not built here (only the control plane's are).
var SkippedPhases = []string{"addon/coredns", "addon/kube-proxy"}

// kubeletConfig is the cluster's KubeletConfiguration (kubeadm uploads it
// and every joining node takes it): the recipe's settings for these
// machines (cgroup v1, no swap accounting, no CAP_SYS_RESOURCE) and
// eviction and image GC off, since the disk is shared with everything
// else (e2e/kubelet.go says why).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
resolvConf: /etc/resolv.conf
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

// nodeRegistration is a node's: its name, containerd's socket (its
// default path, bound per node), every preflight check reported but not
// fatal (the machine is not a kubeadm host: cgroup v1, no systemd, shared
// kernel), and per node the kubelet's address and cgroup root.
func nodeRegistration(n *Node) string {
	return fmt.Sprintf(`nodeRegistration:
  name: %s
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
  ignorePreflightErrors: [all]
  kubeletExtraArgs:
  - name: node-ip
    value: %s
  - name: cgroup-root
    value: %s
`, n.Name, n.Address, n.CgroupRoot)
}

// Init runs kubeadm init --upload-certs on the first node and waits until
// its API server is ready through the load balancer and its Node is
// registered.
func (c *Cluster) Init(ctx context.Context, kubeadm, kubelet string) error {
	n := c.Nodes[0]
	var err error
	if c.lb == nil {
		if c.lb, err = startBalancer(); err != nil {
			return err
		}
	}
	c.lb.add(fmt.Sprintf("%s:%d", n.Address, APIPort))
	if c.Token, err = token(); err != nil {
		return err
	}
	if c.CertificateKey, err = randomHex(32); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
- token: %s
  ttl: 2h0m0s
localAPIEndpoint:
  advertiseAddress: %s
  bindPort: %d
certificateKey: %s
%sskipPhases: [%s]
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: %s
controlPlaneEndpoint: %s
etcd:
  local:
    imageTag: %s
---
%s`, c.Token, n.Address, APIPort, c.CertificateKey, nodeRegistration(n), strings.Join(SkippedPhases, ", "),
		Version, Endpoint, EtcdImage[strings.LastIndex(EtcdImage, ":")+1:], kubeletConfig)
	if err := c.kubeadm(ctx, n, kubeadm, kubelet, "init", cfg, "--upload-certs"); err != nil {
		return err
	}
	return c.waitMember(ctx, n)
}

// Join runs kubeadm join --control-plane on node n with the bootstrap
// token, the CA's hash and the certificate key of Init, and waits as Init
// does. kubeadm adds its etcd member as a learner and promotes it.
func (c *Cluster) Join(ctx context.Context, n *Node, kubeadm, kubelet string) error {
	caHash, err := c.caHash()
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: %s
    token: %s
    caCertHashes: [%s]
%scontrolPlane:
  localAPIEndpoint:
    advertiseAddress: %s
    bindPort: %d
  certificateKey: %s
`, Endpoint, c.Token, caHash, nodeRegistration(n), n.Address, APIPort, c.CertificateKey)
	if err := c.kubeadm(ctx, n, kubeadm, kubelet, "join", cfg); err != nil {
		return err
	}
	c.lb.add(fmt.Sprintf("%s:%d", n.Address, APIPort))
	return c.waitMember(ctx, n)
}

// kubeadm runs `kubeadm <verb> --config <cfg> args...` inside node n,
// starting the node's kubelet once kubeadm has configured it; the output
// goes to <Dir>/kubeadm-<verb>.log.
func (c *Cluster) kubeadm(ctx context.Context, n *Node, kubeadm, kubelet, verb, cfg string, args ...string) error {
	began := time.Now()
	path := filepath.Join(n.Dir, "kubeadm-"+verb+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	kctx, cancel := context.WithTimeout(ctx, KubeadmTimeout)
	defer cancel()
	kubeletErr := n.StartKubeletWhenConfigured(kctx, kubelet)
	log := n.Log("kubeadm-" + verb)
	lf, err := os.Create(log)
	if err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	defer lf.Close()
	cmd := n.Command(kubeadm, append([]string{verb, "--config", path, "--v=1"}, args...)...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("real cluster: kubeadm %s on %s: %w", verb, n.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-kctx.Done():
		_ = cmd.Process.Kill()
		err = fmt.Errorf("%w (after %s)", kctx.Err(), KubeadmTimeout)
		<-done
	}
	cancel() // the kubelet's wait, if kubeadm never configured it
	if kerr, ok := <-kubeletErr; ok && kerr != nil && err == nil {
		err = kerr
	}
	if err != nil {
		return fmt.Errorf("real cluster: kubeadm %s on %s: %w\n--- kubeadm (%s):\n%s\n--- kubelet:\n%s", verb, n.Name, err, log,
			tail(log, 40), tail(n.Log("kubelet"), 30))
	}
	c.timed(n.Name+": kubeadm "+verb, began)
	return nil
}

// waitMember waits until node n's own API server is ready (GET /readyz on
// its address, verified with the cluster's CA) and its Node is
// registered (through the load balancer, as admin).
func (c *Cluster) waitMember(ctx context.Context, n *Node) error {
	began := time.Now()
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	var last error
	err = waitFor(ctx, n.Name+"'s API server /readyz", 3*time.Minute, func() (bool, error) {
		last = Readyz(ctx, hc, fmt.Sprintf("%s:%d", n.Address, APIPort))
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", err, last)
	}
	api, err := kubeapi.Connect(c.AdminConf())
	if err != nil {
		return err
	}
	err = waitFor(ctx, "Node "+n.Name+" registered", 2*time.Minute, func() (bool, error) {
		_, last = api.GetNode(ctx, n.Name)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", err, last)
	}
	c.timed(n.Name+": API server ready and Node registered", began)
	return nil
}

// AdminConf is the first node's admin kubeconfig, as the host sees it
// (its server is the load balancer).
func (c *Cluster) AdminConf() string { return c.Nodes[0].HostPath("/etc/kubernetes/admin.conf") }

// caCert is the cluster's CA certificate (the first node's).
func (c *Cluster) caCert() (*x509.Certificate, []byte, error) {
	b, err := os.ReadFile(c.Nodes[0].HostPath("/etc/kubernetes/pki/ca.crt"))
	if err != nil {
		return nil, nil, fmt.Errorf("real cluster: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, nil, fmt.Errorf("real cluster: ca.crt: no PEM block")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("real cluster: ca.crt: %w", err)
	}
	return cert, b, nil
}

// caHash is kubeadm's discovery hash of the CA: sha256 of its public key.
func (c *Cluster) caHash() (string, error) {
	cert, _, err := c.caCert()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// httpClient trusts the cluster's CA only.
func (c *Cluster) httpClient() (*http.Client, error) {
	_, pemBytes, err := c.caCert()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

// Readyz is nil when the API server at addr answers GET /readyz with 200
// (anonymously, as kubeadm's system:public-info-viewer allows).
func Readyz(ctx context.Context, hc *http.Client, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET https://%s/readyz: %s", addr, resp.Status)
	}
	return nil
}

// token is a bootstrap token: [a-z0-9]{6}.[a-z0-9]{16}.
func token() (string, error) {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b[:6]) + "." + string(b[6:]), nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
