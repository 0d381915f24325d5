package realcluster

// The cluster's stacked etcd as kubeadm made it, read through the first
// node's healthcheck client certificate (kubeadm's own, for probes).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Member is one etcd member as the cluster reports it.
type Member struct {
	Name    string
	Learner bool
}

// EtcdMembers lists the etcd members, asking node n's etcd on its address.
func (c *Cluster) EtcdMembers(ctx context.Context, n *Node) ([]Member, error) {
	pki := c.Nodes[0].HostPath("/etc/kubernetes/pki/etcd")
	cert, err := tls.LoadX509KeyPair(pki+"/healthcheck-client.crt", pki+"/healthcheck-client.key")
	if err != nil {
		return nil, fmt.Errorf("real cluster: etcd client certificate: %w", err)
	}
	ca, err := os.ReadFile(pki + "/ca.crt")
	if err != nil {
		return nil, fmt.Errorf("real cluster: etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{fmt.Sprintf("https://%s:2379", n.Address)},
		DialTimeout: 5 * time.Second,
		TLS:         &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool},
		Logger:      nil,
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
