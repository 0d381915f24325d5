package realcluster

// The cluster's stacked etcd as kubeadm made it, read through the first
// node's apiserver-etcd-client certificate (the API server's own).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Member is one etcd member as the cluster reports it.
type Member struct {
	Name    string
	Learner bool
}

// etcdTLS is the client TLS of kubeadm's apiserver-etcd-client
// certificate, which the API server writes to etcd with.
func (c *Cluster) etcdTLS() (*tls.Config, error) {
	pki := c.Nodes[0].HostPath("/etc/kubernetes/pki")
	cert, err := tls.LoadX509KeyPair(pki+"/apiserver-etcd-client.crt", pki+"/apiserver-etcd-client.key")
	if err != nil {
		return nil, fmt.Errorf("real cluster: etcd client certificate: %w", err)
	}
	ca, err := os.ReadFile(pki + "/etcd/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("real cluster: etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// EtcdMembers lists the etcd members, asking node n's etcd on its address.
func (c *Cluster) EtcdMembers(ctx context.Context, n *Node) ([]Member, error) {
	tlsCfg, err := c.etcdTLS()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{fmt.Sprintf("https://%s:2379", n.Address)},
		DialTimeout: 5 * time.Second,
		TLS:         tlsCfg,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("real cluster: etcd client: %w", err)
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(mctx)
	if err != nil {
		return nil, fmt.Errorf("real cluster: etcd member list from %s: %w", n.Name, err)
	}
	var out []Member
	for _, m := range resp.Members {
		out = append(out, Member{Name: m.Name, Learner: m.IsLearner})
	}
	return out, nil
}
