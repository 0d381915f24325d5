package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ciq/stratum-upgrade/engine"
	"github.com/ciq/stratum-upgrade/journal"
	"github.com/ciq/stratum-upgrade/kubeapi"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// recordingAPI is an HTTPS server that answers every request 404 (no
// Node, no ConfigMap) and records each one as "METHOD path".
type recordingAPI struct {
	mu   sync.Mutex
	seen []string
	srv  *httptest.Server
}

func newRecordingAPI(t *testing.T) *recordingAPI {
	a := &recordingAPI{}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r.Method+" "+r.URL.Path)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// adminConf writes dir/kube/admin.conf, a kubeconfig of the API server at
// url, and returns its directory.
func adminConf(t *testing.T, dir, url string) string {
	t.Helper()
	kube := filepath.Join(dir, "kube")
	if err := os.MkdirAll(kube, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q, insecure-skip-tls-verify: true}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n", url)
	if err := os.WriteFile(filepath.Join(kube, "admin.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return kube
}

func (a *recordingAPI) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen)
}

// TestClusterViewFlagsOff: with --no-events nothing is sent about the Node
// (no Event, no annotation), with --no-kubeadm-config nothing about
// kubeadm-config and no update is recorded, with both not a request at
// all; with neither, both are asked for.
func TestClusterViewFlagsOff(t *testing.T) {
	for _, c := range []struct {
		name                  string
		noEvents, noKubeadm   bool
		wantNode, wantKubeadm bool
	}{
		{"both on", false, false, true, true},
		{"--no-events", true, false, false, true},
		{"--no-kubeadm-config", false, true, true, false},
		{"both off", true, true, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := newRecordingAPI(t)
			dir := t.TempDir()
			kube := adminConf(t, dir, api.srv.URL)
			g := &globals{stateDir: filepath.Join(dir, "state"), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			g.api.noEvents, g.api.noKubeadmConfig = c.noEvents, c.noKubeadm
			if err := os.MkdirAll(g.stateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			old := loadState(t)
			old.KubeconfigDir = kube
			j := openTestJournal(t, g.stateDir, old)
			v := g.openCluster(j)
			st := old.Clone()
			st.KubernetesVersion, st.Images[nodestate.KubeAPIServer] = "v1.34.5", "registry.k8s.io/kube-apiserver:v1.34.5"
			id := commitTestTxn(t, j, old, st)
			now := time.Now()
			for _, step := range []string{"begin", "done", "commit"} {
				v.event(engine.Event{Time: now, Txn: id, Phase: string(journal.PhaseApplying), Step: step, Message: step})
			}
			v.ended(engine.End{Txn: id, Kind: "upgrade", Outcome: engine.Committed, State: st, From: old, Target: st})
			owed, err := lastChange(j)
			if err != nil || owed == nil || owed.Txn != id {
				t.Fatalf("the journal's last change: %+v %v, want %s", owed, err, id)
			}
			if got, err := kubeapi.Owed(g.stateDir, owed); err != nil || (got != nil) != c.wantKubeadm {
				t.Errorf("kubeadm-config update owed: %+v %v, want %v", got, err, c.wantKubeadm)
			}
			v.finish()
			var node, kubeadm bool
			for _, r := range api.requests() {
				switch {
				case strings.Contains(r, "/nodes"), strings.Contains(r, "/events"):
					node = true
				case strings.Contains(r, "/configmaps/kubeadm-config"):
					kubeadm = true
				default:
					t.Errorf("unexpected request %s", r)
				}
			}
			if node != c.wantNode || kubeadm != c.wantKubeadm {
				t.Errorf("requests %v: about the Node %v (want %v), about kubeadm-config %v (want %v)", api.requests(), node, c.wantNode, kubeadm, c.wantKubeadm)
			}
		})
	}
}

// TestClusterViewSkewSource: the APIServerSkew pre-flight asks the API
// server whatever --no-events and --no-kubeadm-config say (they are about
// telling it); one that does not answer is the engine's
// ErrAPIServerUnanswered (a pause), one that answers is not.
func TestClusterViewSkewSource(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "https://" + l.Addr().String()
	l.Close()
	for _, c := range []struct {
		name, url  string
		unanswered bool
	}{{"answers 404", newRecordingAPI(t).srv.URL, false}, {"down", down, true}} {
		g := &globals{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		g.api.noEvents, g.api.noKubeadmConfig = true, true
		st := &nodestate.NodeState{NodeName: "cp-1", KubeconfigDir: adminConf(t, t.TempDir(), c.url)}
		read := g.clusterOf(st).apiServers()
		if read == nil {
			t.Fatalf("%s: no read of the control-plane nodes with a kubeconfig", c.name)
		}
		_, err := read(t.Context())
		if err == nil || errors.Is(err, engine.ErrAPIServerUnanswered) != c.unanswered {
			t.Errorf("%s: %v; want an error, unanswered %v", c.name, err, c.unanswered)
		}
	}
}

// TestClusterViewKubeletSource: the StaticPodKubelet pre-flight reads this
// node's running kubelet from its Node (the node state's nodeName)
// whatever --no-events says, and so does plan's; without a kubeconfig there is nothing to
// read, and an API server that does not answer is an error, not a version.
func TestClusterViewKubeletSource(t *testing.T) {
	var asked []string
	srv := nodeServer(t, &asked)
	g := &globals{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g.api.noEvents = true
	st := &nodestate.NodeState{NodeName: "cp-1", AdvertiseAddress: "10.0.0.11", KubeconfigDir: adminConf(t, t.TempDir(), srv.URL)}
	read := g.clusterOf(st).kubelet()
	if read == nil {
		t.Fatal("no read of the kubelet with a kubeconfig")
	}
	if v, err := read(t.Context()); err != nil || v != "v1.34.4" || !slices.Equal(asked, []string{"/api/v1/nodes/cp-1"}) {
		t.Fatalf("kubelet %q %v (asked %v); want v1.34.4 from Node cp-1", v, err, asked)
	}

	// plan's, through the same admin.conf, read once.
	asked = nil
	plan := g.planKubelet(st)
	for range 2 {
		if v, err := plan(t.Context()); err != nil || v != "v1.34.4" || !slices.Equal(asked, []string{"/api/v1/nodes/cp-1"}) {
			t.Fatalf("plan's kubelet %q %v (asked %v); want v1.34.4 from Node cp-1, once", v, err, asked)
		}
	}

	st.KubeconfigDir = t.TempDir() // no admin.conf
	if g.clusterOf(st).kubelet() != nil || g.planKubelet(st) != nil {
		t.Error("a read of the kubelet without a kubeconfig")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "https://" + l.Addr().String()
	l.Close()
	st.KubeconfigDir = adminConf(t, t.TempDir(), down)
	if v, err := g.clusterOf(st).kubelet()(t.Context()); err == nil || v != "" {
		t.Errorf("API down: %q %v; want an error", v, err)
	}
}

// TestClusterViewOwesVersionChangesOnly: only a commit that changed the
// versions owes the kubeadm-config update (lastChange); a commit that
// left them (a restart, an extra arg) owes nothing: on a node of a
// multi-member cluster not yet upgraded it would set the cluster's
// configuration back to this node's older versions. The commits before
// the mark was made owe nothing either.
func TestClusterViewOwesVersionChangesOnly(t *testing.T) {
	dir := t.TempDir()
	g := &globals{stateDir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g.api.noEvents = true
	st := loadState(t)
	j := openTestJournal(t, dir, st)
	etcd := st.Clone()
	etcd.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.5.36-0"
	before := commitTestTxn(t, j, st, etcd) // made before the mark: owes nothing
	cv := g.openCluster(j)
	// No transaction began yet (a pre-flight refusal ends here): no mark.
	if m, err := kubeapi.LoadMark(dir); err != nil || m != nil {
		t.Fatalf("mark before the transaction began: %+v, %v; want none", m, err)
	}
	cv.event(engine.Event{Txn: "20261205T040000Z-0001", Step: "begin"})
	if last, _ := lastChange(j); last == nil || last.Txn != before {
		t.Fatalf("last change %+v, want %s", last, before)
	}
	owed := func() *kubeapi.Change {
		t.Helper()
		last, err := lastChange(j)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kubeapi.Owed(dir, last)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := owed(); c != nil {
		t.Errorf("a commit before the mark owes %+v", c)
	}
	args := etcd.Clone()
	args.SetExtraArg(nodestate.Scheduler, "v", "2")
	commitTestTxn(t, j, etcd, args)
	if c := owed(); c != nil {
		t.Errorf("an extra arg's commit owes %+v", c)
	}
	back := commitTestTxn(t, j, args, st)
	if c := owed(); c == nil || c.Txn != back || c.Versions.EtcdImage != st.Images[nodestate.Etcd] {
		t.Errorf("etcd's image changed back: owed %+v, want %s", c, back)
	}
}

// loadState is testdata/states/default.yaml.
func loadState(t *testing.T) *nodestate.NodeState {
	t.Helper()
	st, err := nodestate.Load("../../testdata/states/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openTestJournal is a journal in dir holding st.
func openTestJournal(t *testing.T, dir string, st *nodestate.NodeState) *journal.Journal {
	t.Helper()
	j, err := journal.Open(filepath.Join(dir, JournalFile), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if err := j.PutNodeState(st); err != nil {
		t.Fatal(err)
	}
	return j
}

// commitTestTxn journals an upgrade from one node state to another,
// committed, and returns its id.
func commitTestTxn(t *testing.T, j *journal.Journal, from, to *nodestate.NodeState) string {
	t.Helper()
	b, err := from.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	txn, err := j.Begin(journal.Txn{Kind: "upgrade", From: b})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(txn.ID, to); err != nil {
		t.Fatal(err)
	}
	return txn.ID
}

// TestClusterViewMissingKubeconfig: no admin.conf in kubeconfigDir is a
// node without an API server to tell (logged at info); a --kubeconfig
// naming a file that does not exist is a warning naming it. Neither stops
// the command.
func TestClusterViewMissingKubeconfig(t *testing.T) {
	for _, explicit := range []bool{false, true} {
		var log strings.Builder
		g := &globals{stateDir: t.TempDir(), log: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		st := &nodestate.NodeState{NodeName: "cp-1", KubeconfigDir: t.TempDir()}
		if explicit {
			g.api.kubeconfig = filepath.Join(t.TempDir(), "missing.conf")
		}
		v := g.clusterOf(st)
		if v.cs != nil || v.poster != nil {
			t.Errorf("explicit %v: a client without a kubeconfig", explicit)
		}
		v.finish()
		if got := strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "missing.conf"); got != explicit {
			t.Errorf("explicit %v: warned %v:\n%s", explicit, got, log.String())
		}
	}
}

// nodeServer is an API server (TLS) that knows one Node, cp-1, running
// kubelet v1.34.4, and answers 404 to anything else; every path asked is
// appended to asked, when not nil.
func nodeServer(t *testing.T, asked *[]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked != nil {
			*asked = append(*asked, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/nodes/cp-1" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		fmt.Fprint(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"cp-1"},"status":{"nodeInfo":{"kubeletVersion":"v1.34.4"}}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}
