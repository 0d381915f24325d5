package engine

// Rollbacks that lose no etcd write (issue 30), on real etcd 3.5, 3.6 and
// 3.7 under the real control plane: a writer puts a numbered key every
// 20 ms through the upgrade and its rollback; afterwards every write etcd
// acknowledged reads back, whichever way the rollback took etcd's data.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdclient"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// etcdWriter puts w/<n> every 20 ms until stopped, and remembers which
// puts etcd acknowledged.
type etcdWriter struct {
	cli   *clientv3.Client
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	acked []string
	tries int
}

func startWriter(t *testing.T, f *fixture) *etcdWriter {
	t.Helper()
	w := &etcdWriter{cli: etcdclient.New(t, f.node), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			k := fmt.Sprintf("w/%07d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := w.cli.Put(ctx, k, "v")
			cancel()
			w.mu.Lock()
			w.tries++
			if err == nil {
				w.acked = append(w.acked, k)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// finish stops the writer and reads back every acknowledged key: it
// returns how many were acknowledged and how many are gone.
func (w *etcdWriter) finish(t *testing.T) (acked, lost int) {
	t.Helper()
	close(w.stop)
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := w.cli.Get(ctx, "w/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("reading the writer's keys back: %v", err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	for _, k := range w.acked {
		if !have[k] {
			lost++
		}
	}
	return len(w.acked), lost
}

// etcdPath is the way the transaction's rollback took etcd's data, from
// its journal: kept, downgraded or restored.
func etcdPath(t *testing.T, j *journal.Journal, id string) string {
	t.Helper()
	recs, err := j.Records(id)
	if err != nil {
		t.Fatal(err)
	}
	path := ""
	for _, r := range recs {
		switch {
		case r.Step == journal.StepEtcdData:
			path = map[string]string{journal.EtcdKeep: "kept", journal.EtcdDowngrade: "downgraded", journal.EtcdRestore: "restored"}[r.EtcdData]
		case r.Step == journal.StepEtcdRestored:
			path = "restored"
		}
	}
	return path
}

// TestRealEtcdRollbackLosesNoWrite rolls back an upgrade of etcd on one
// member after etcd's step, under a writer, in each way a rollback takes
// etcd's data: a newer minor that answered is downgraded with etcd's
// protocol (3.5 -> 3.6, 3.6 -> 3.7; the kube-apiserver 1.37 of the same
// release refuses a feature gate and fails it), a patch release within the
// minor is kept, and so is the data of a new etcd whose image is missing.
// Every acknowledged write reads back.
func TestRealEtcdRollbackLosesNoWrite(t *testing.T) {
	from, to := kubebuild.Versions[0], kubebuild.Versions[len(kubebuild.Versions)-1]
	needReal(t)
	gate := func(st *nodestate.NodeState) {
		st.ExtraArgs[nodestate.KubeAPIServer]["feature-gates"] = nodestate.ArgValues{"HostnameOverride=false"}
	}
	for _, c := range []struct {
		name, old, new, want, kube string
		mapTo                      string // the etcd build the new image runs, when it is no build's own
	}{
		{name: "3.5-to-3.6", old: "registry.k8s.io/etcd:3.5.35-0", new: "registry.k8s.io/etcd:3.6.16-0", want: "downgraded", kube: to},
		{name: "3.6-to-3.7", old: "registry.k8s.io/etcd:3.6.16-0", new: "registry.k8s.io/etcd:3.7.3-0", want: "downgraded", kube: to},
		{name: "3.6.16-to-3.6.17", old: "registry.k8s.io/etcd:3.6.16-0", new: "registry.k8s.io/etcd:3.6.17-0", want: "kept", kube: to, mapTo: "3.6"},
		{name: "image-missing", old: "registry.k8s.io/etcd:3.6.16-0", new: "registry.k8s.io/etcd:3.7.99-0", want: "kept", kube: from},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := realFixture(t, "testdata/states/real.yaml", from, c.old, gate)
			if c.mapTo != "" {
				bin, err := etcdbuild.Binary(c.mapTo)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.node.MapImage(c.new, kubeletsim.Image{Binary: bin}); err != nil {
					t.Fatal(err)
				}
			}
			dl := realDeadlines
			dl.Replace, dl.Active = 30*time.Second, 20*time.Second
			f.e = f.engine(f.node.Scanner, dl)
			before := f.manifests()
			w := startWriter(t, f)
			t0 := time.Now()
			res, err := f.e.Run(t.Context(), realRelease(c.kube, c.new), nil)
			took := time.Since(t0)
			if !errors.Is(err, ErrRolledBack) || res.Outcome != RolledBack {
				w.finish(t)
				t.Fatalf("Run: %+v %v, want rolled back", res, err)
			}
			acked, lost := w.finish(t)
			f.checkConverged(RolledBack, before)
			path := etcdPath(t, f.j, res.Txn)
			t.Logf("etcd rollback %s: writes acked %d, lost %d (of %d tries; the transaction took %s)", path, acked, lost, w.tries, took.Round(time.Millisecond))
			fmt.Printf("etcd rollback %s (%s): writes acked %d, lost %d\n", path, c.name, acked, lost)
			if path != c.want {
				t.Errorf("etcd's data was %s, want %s", path, c.want)
			}
			if lost != 0 || acked == 0 {
				t.Errorf("%d of %d acknowledged writes are gone", lost, acked)
			}
			if v := etcdclient.Version(t, f.node); !strings.HasPrefix(c.old, "registry.k8s.io/etcd:"+v) {
				t.Errorf("etcd reports %s after the rollback, want %s's", v, c.old)
			}
		})
	}
}
