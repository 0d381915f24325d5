package engine

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

type kubeletImage = kubeletsim.Image

var jsonUnmarshal = json.Unmarshal

func killPID(pid int) { syscall.Kill(pid, syscall.SIGKILL) }

func etcdClient(t *testing.T, n *testbed.Node) *clientv3.Client {
	t.Helper()
	tlsCfg, err := n.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.EtcdEndpoint()}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func putKey(t *testing.T, n *testbed.Node, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := etcdClient(t, n).Put(ctx, k, v); err != nil {
		t.Errorf("etcd put %s: %v", k, err)
	}
}

func getKey(t *testing.T, n *testbed.Node, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := etcdClient(t, n).Get(ctx, k)
	if err != nil {
		t.Fatalf("etcd get %s: %v", k, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func etcdVersion(t *testing.T, n *testbed.Node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := etcdClient(t, n).Status(ctx, n.EtcdEndpoint())
	if err != nil {
		t.Fatalf("etcd status: %v", err)
	}
	return st.Version
}
