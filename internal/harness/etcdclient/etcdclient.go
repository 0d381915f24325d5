// Package etcdclient reaches a test node's etcd over TLS with the node's
// own certificates, for the tests and the benchmarks: a client closed when
// the test ends, and a key put, a key read and the server version, each
// failing the test when etcd does not answer within 10 s.
//
// The demo does not use it: it keeps etcd's client out of its build (see
// internal/harness/cmd/demo) and talks to etcd's JSON gateway instead.
package etcdclient

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Node is a node whose etcd the helpers reach: a *testbed.Node, or the
// end-to-end tests' node on a real kubelet.
type Node interface {
	// EtcdEndpoint is etcd's client URL.
	EtcdEndpoint() string
	// EtcdTLS is the client TLS configuration: the
	// apiserver-etcd-client certificate and the etcd CA.
	EtcdTLS() (*tls.Config, error)
}

// timeout bounds each request.
const timeout = 10 * time.Second

// New is a client of n's etcd, closed when t ends.
func New(t testing.TB, n Node) *clientv3.Client {
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

// Put writes k = v; a failure fails t at once (Fatalf: call it from the
// test's goroutine, as an engine event hook is).
func Put(t testing.TB, n Node, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := New(t, n).Put(ctx, k, v); err != nil {
		t.Fatalf("etcd put %s: %v", k, err)
	}
}

// Get reads k: "" when it is not there.
func Get(t testing.TB, n Node, k string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := New(t, n).Get(ctx, k)
	if err != nil {
		t.Fatalf("etcd get %s: %v", k, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// Version is the server version etcd reports in its status.
func Version(t testing.TB, n Node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := New(t, n).Status(ctx, n.EtcdEndpoint())
	if err != nil {
		t.Fatalf("etcd status: %v", err)
	}
	return st.Version
}
