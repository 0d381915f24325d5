package cli

import (
	"fmt"
	"io"
	"log/slog"
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
			kube := filepath.Join(dir, "kube")
			if err := os.MkdirAll(kube, 0o700); err != nil {
				t.Fatal(err)
			}
			conf := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q, insecure-skip-tls-verify: true}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n", api.srv.URL)
			if err := os.WriteFile(filepath.Join(kube, "admin.conf"), []byte(conf), 0o600); err != nil {
				t.Fatal(err)
			}
			g := &globals{stateDir: filepath.Join(dir, "state"), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			g.api.noEvents, g.api.noKubeadmConfig = c.noEvents, c.noKubeadm
			if err := os.MkdirAll(g.stateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			st := &nodestate.NodeState{NodeName: "cp-1", AdvertiseAddress: "10.0.0.11", KubeconfigDir: kube, KubernetesVersion: "v1.37.2",
				Images: map[string]string{nodestate.KubeAPIServer: "registry.k8s.io/kube-apiserver:v1.37.2", nodestate.Etcd: "registry.k8s.io/etcd:3.7.3-0"}}
			v := g.clusterOf(st)
			now := time.Now()
			for _, step := range []string{"begin", "done", "commit"} {
				v.event(engine.Event{Time: now, Txn: "t1", Phase: string(journal.PhaseApplying), Step: step, Message: step})
			}
			old := st.Clone()
			old.KubernetesVersion, old.Images[nodestate.KubeAPIServer] = "v1.36.3", "registry.k8s.io/kube-apiserver:v1.36.3"
			v.ended(engine.End{Txn: "t1", Kind: "upgrade", Outcome: engine.Committed, State: st, From: old, Target: st})
			recorded, err := kubeapi.LoadPending(g.stateDir)
			if err != nil {
				t.Fatal(err)
			}
			if (recorded != nil) != c.wantKubeadm {
				t.Errorf("kubeadm-config update recorded: %+v, want %v", recorded, c.wantKubeadm)
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

// TestClusterViewRecordsVersionChangesOnly: a commit that left the
// versions (a restart, an extra arg) owes kubeadm-config nothing: on a node
// of a multi-member cluster not yet upgraded it would set the cluster's
// configuration back to this node's older versions. A rollback owes
// nothing either.
func TestClusterViewRecordsVersionChangesOnly(t *testing.T) {
	dir := t.TempDir()
	g := &globals{stateDir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	g.api.noEvents = true
	st := &nodestate.NodeState{KubernetesVersion: "v1.36.3", Images: map[string]string{
		nodestate.KubeAPIServer: "registry.k8s.io/kube-apiserver:v1.36.3", nodestate.Etcd: "registry.k8s.io/etcd:3.6.16-0"}}
	v := &clusterView{g: g, cs: downClientset(t)}
	etcd := st.Clone()
	etcd.Images[nodestate.Etcd] = "registry.k8s.io/etcd:3.6.17-0"
	for _, c := range []struct {
		name    string
		outcome engine.Outcome
		from    *nodestate.NodeState
		want    bool
	}{
		{"restart", engine.Committed, st.Clone(), false},
		{"rolled back", engine.RolledBack, etcd, false},
		{"etcd's image", engine.Committed, etcd, true},
	} {
		_ = os.Remove(filepath.Join(dir, kubeapi.PendingFile))
		v.ended(engine.End{Txn: "t1", Outcome: c.outcome, State: st, From: c.from, Target: st})
		p, err := kubeapi.LoadPending(dir)
		if err != nil || (p != nil) != c.want {
			t.Errorf("%s: record %+v %v, want one: %v", c.name, p, err, c.want)
		}
	}
}

// downClientset is a client of an API server nothing listens for.
func downClientset(t *testing.T) kubeapi.API {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "admin.conf")
	if err := os.WriteFile(conf, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cs, err := kubeapi.Connect(conf)
	if err != nil {
		t.Fatal(err)
	}
	return cs
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
