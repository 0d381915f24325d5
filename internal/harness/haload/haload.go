// Package haload is the client the three-node tests run during a rollout
// (issue 14): it writes a key through the whole etcd cluster every 10 ms
// and asks a live API server for its health every 10 ms (the first of the
// nodes, in rotation, that answers, as a load balancer with health checks
// would), until checked; then every acknowledged write must read back and
// at least 99.9% of the API requests must have been answered. Check logs
// both figures as an "HA figures:" line, which make ha collects. The
// member probe (members.go) counts the etcd members that answer, sampled
// every 100 ms, for the tests that must never see two of three down.
package haload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Load is the running client.
type Load struct {
	acked            []string
	writes, failed   atomic.Int64
	apiOK, apiFailed atomic.Int64
	stop             chan struct{}
	done             sync.WaitGroup
	c                *testbed.Cluster
}

// Start starts the client against c; it stops when t ends at the latest.
func Start(t *testing.T, c *testbed.Cluster) *Load {
	t.Helper()
	tlsCfg, err := c.EtcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	l := &Load{stop: make(chan struct{}), c: c}
	l.done.Add(2)
	go func() {
		defer l.done.Done()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			k := fmt.Sprintf("load/%06d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := cli.Put(ctx, k, k)
			cancel()
			l.writes.Add(1)
			if err != nil {
				l.failed.Add(1)
				continue
			}
			l.acked = append(l.acked, k)
		}
	}()
	go func() {
		defer l.done.Done()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ok := false
			for j := range c.Nodes {
				n := c.Nodes[(i+j)%len(c.Nodes)]
				tgt, err := n.Target(nodestate.KubeAPIServer)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ok = err == nil && n.Scanner.Active(ctx, tgt)
				cancel()
				if ok {
					break
				}
			}
			if ok {
				l.apiOK.Add(1)
			} else {
				l.apiFailed.Add(1)
			}
		}
	}()
	t.Cleanup(l.halt)
	return l
}

func (l *Load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.done.Wait()
}

// Figures are the client's counts.
type Figures struct {
	// Writes is how many writes the client made, Acked how many etcd
	// acknowledged, Lost how many of those do not read back.
	Writes, Acked, Lost int
	// APIOK of APIAsked health checks found a live API server.
	APIOK, APIAsked int64
}

// API is the share of the health checks a live API server answered, in
// percent.
func (f Figures) API() float64 { return 100 * float64(f.APIOK) / float64(max(1, f.APIAsked)) }

// Result stops the client and reads back every acknowledged write through
// the first node; it fails t when that read fails.
func (l *Load) Result(t *testing.T) Figures {
	t.Helper()
	l.halt()
	cli := etcdclient.New(t, l.c.Nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, "load/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, kv := range r.Kvs {
		have[string(kv.Key)] = true
	}
	f := Figures{Writes: int(l.writes.Load()), Acked: len(l.acked), APIOK: l.apiOK.Load(), APIAsked: l.apiOK.Load() + l.apiFailed.Load()}
	for _, k := range l.acked {
		if !have[k] {
			f.Lost++
		}
	}
	return f
}

// Check stops the client, reads back every acknowledged write through the
// first node that answers, fails t on a lost write or an API availability
// under 99.9%, and logs the figures of scenario.
func (l *Load) Check(t *testing.T, scenario string) {
	t.Helper()
	f := l.Result(t)
	if f.Lost > 0 {
		t.Errorf("%d of %d acknowledged writes are gone", f.Lost, f.Acked)
	}
	t.Logf("HA figures: %s: etcd writes acknowledged %d of %d, %d lost; API server requests answered %.2f%% (%d of %d)",
		scenario, f.Acked, f.Writes, f.Lost, f.API(), f.APIOK, f.APIAsked)
	if f.API() < 99.9 {
		t.Errorf("API server requests answered %.3f%%, want >= 99.9%%", f.API())
	}
}
