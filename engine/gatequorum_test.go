package engine

// The quorum gates decide from what they must know, right before the stop
// (issue 37): a member lost while a gate waits refuses the stop. (A member
// that answers with an alarm raised is a vote: rollbackgate_test.go.)

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ciq/stratum-upgrade/etcddata"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdcluster"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// killDuringDowngrade is the model's etcd with a real downgrade: etcd's
// protocol runs on the real member at cfg, and victim is killed once
// etcd's cluster version moved to the target, while the downgrade waits
// for the storage version to follow. (Earlier, after the enable but
// before the cluster version moves, a dead member stalls the downgrade:
// etcd moves the cluster version only with every member's version read.)
// Should the wait end before the poll saw the move, victim is killed
// then, still within the gate, after its first check.
type killDuringDowngrade struct {
	*fakeEtcd
	t      *testing.T
	cfg    etcddata.ClientConfig
	victim *etcdcluster.Member
	// storage is this member's storage version when victim was killed.
	storage string
}

func (k *killDuringDowngrade) Downgrade(ctx context.Context, st *nodestate.NodeState, target string, timeout time.Duration, enabling func(sent bool) error) (etcddata.Downgraded, error) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if v := versionsAt(ctx, k.cfg.Endpoint); strings.HasPrefix(v.Cluster, target+".") {
				k.kill(v.Storage)
				return
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	got, err := etcddata.Downgrade(ctx, k.cfg, target, timeout, enabling)
	close(done)
	wg.Wait()
	if k.victim.Running() {
		k.kill(got.StorageVersion + " (the wait ended first)")
	}
	return got, err
}

func (k *killDuringDowngrade) kill(storage string) {
	k.storage = storage
	if err := k.victim.Kill(); err != nil {
		k.t.Error(err)
	}
}

// etcdVersions is a member's cluster version (from /version) and storage
// version (from its status); "" for what it did not answer.
type etcdVersions struct{ Cluster, Storage string }

func versionsAt(ctx context.Context, url string) etcdVersions {
	var v etcdVersions
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/version", nil)
	if err != nil {
		return v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v
	}
	defer resp.Body.Close()
	var body struct {
		Cluster string `json:"etcdcluster"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return v
	}
	v.Cluster = body.Cluster
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return v
	}
	defer cli.Close()
	if st, err := cli.Status(ctx, url); err == nil {
		v.Storage = st.StorageVersion
	}
	return v
}

func (k *killDuringDowngrade) CancelDowngrade(ctx context.Context, _ *nodestate.NodeState, target string) error {
	return etcddata.CancelDowngrade(ctx, k.cfg, target)
}

// TestDowngradeStepRechecksTheQuorum: a rollback --last moving this
// member's etcd from 3.6 down to 3.5 runs etcd's real downgrade protocol
// after the quorum gate passed; a follower dies after the enable, while
// the step waits for the storage version (killDuringDowngrade). The gate
// checks the quorum again before the stop: the step fails naming that member, and etcd's
// manifest is never rewritten (it was stopped on the earlier check, with
// the quorum lost).
func TestDowngradeStepRechecksTheQuorum(t *testing.T) {
	c := etcdcluster.Start(t, 3, "3.6")
	n := newMemNode(t)
	memberOfCluster(t, n, c.Members[0])
	f := &fakeVersions{clusterVersion: "3.5.0", others: map[string]string{"cp-2": "3.5.35", "cp-3": "3.5.35"}}
	e := n.engine(nil)
	e.etcdVersions = f.read
	if res, err := e.Run(t.Context(), release(n.st, true, "", ""), nil); err != nil || res.Outcome != Committed {
		t.Fatalf("upgrade to etcd 3.6: %+v %v", res, err)
	}
	upgraded, err := n.store.Read(nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	// The victim is a follower: a leader's death would end the leader
	// move in an election, failing the step for another reason.
	cli := c.Client(t)
	victim := c.Members[1]
	if leads(t, cli, victim) {
		victim = c.Members[2]
	}
	k := &killDuringDowngrade{fakeEtcd: n.etcd, t: t, cfg: etcddata.ClientConfig{Endpoint: c.Members[0].ClientURL, DialTimeout: 2 * time.Second}, victim: victim}
	e = n.engine(nil)
	e.etcdVersions, e.etcd = f.read, k
	res, err := e.RollbackLast(t.Context())
	if victim.Running() {
		t.Fatalf("the test killed no member during the downgrade's wait (rollback --last: %+v %v)", res, err)
	}
	t.Logf("%s killed with this member's storage version at %s", victim.Name, k.storage)
	if res.Outcome == Committed || !strings.Contains(res.Reason+" "+errString(err), victim.Name) {
		t.Fatalf("rollback --last with %s killed during the downgrade: %+v %v; want the step refused naming it", victim.Name, res, err)
	}
	if got, err := n.store.Read(nodestate.Etcd); err != nil || !bytes.Equal(got, upgraded) {
		t.Fatalf("etcd's manifest changed (%v): the step stopped this member on a quorum checked before %s died", err, victim.Name)
	}
}

// leads reports whether m leads, as its own status says.
func leads(t *testing.T, cli *clientv3.Client, m *etcdcluster.Member) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, m.ClientURL)
	if err != nil {
		t.Fatalf("status of %s: %v", m.Name, err)
	}
	return st.Leader == st.Header.MemberId
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
