package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ciq/stratum-upgrade/fault"
	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// kubeadmConfigAPI is an API server of the kubeadm-config ConfigMap only,
// as kube-apiserver answers its GET and PUT (the resourceVersion checked):
// the real one runs in make test-real (TestRealKubeAPI); this test needs a
// crash between the commit and the update, which the real one cannot time.
type kubeadmConfigAPI struct {
	mu sync.Mutex
	cm map[string]any
	rv int
}

func (a *kubeadmConfigAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.URL.Path != "/api/v1/namespaces/kube-system/configmaps/kubeadm-config" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		return
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		var cm map[string]any
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &cm); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if rv := cm["metadata"].(map[string]any)["resourceVersion"]; rv != fmt.Sprint(a.rv) {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`)
			return
		}
		a.rv++
		cm["metadata"].(map[string]any)["resourceVersion"] = fmt.Sprint(a.rv)
		a.cm = cm
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a.cm)
}

// version is the ConfigMap's resourceVersion: one more each write.
func (a *kubeadmConfigAPI) version() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rv
}

// kubernetesVersion is the ClusterConfiguration's kubernetesVersion line.
func (a *kubeadmConfigAPI) kubernetesVersion() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	data := a.cm["data"].(map[string]any)["ClusterConfiguration"].(string)
	for _, l := range strings.Split(data, "\n") {
		if v, ok := strings.CutPrefix(l, "kubernetesVersion: "); ok {
			return v
		}
	}
	return ""
}

// TestKubeadmConfigUpdateSurvivesCrash: a crash right after the journal's
// commit (STRATUM_FAULT=after-commit), before the command could tell the
// API server, loses no kubeadm-config update: the next command does it,
// as the journal says the versions changed.
func TestKubeadmConfigUpdateSurvivesCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a test bed node")
	}
	t.Parallel()
	bin, err := build.StratumUpgrade(true)
	if err != nil {
		t.Fatal(err)
	}
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/default.yaml"})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)

	api := &kubeadmConfigAPI{rv: 1, cm: map[string]any{
		"kind": "ConfigMap", "apiVersion": "v1",
		"metadata": map[string]any{"name": "kubeadm-config", "namespace": "kube-system", "resourceVersion": "1"},
		"data":     map[string]any{"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: " + n.State.KubernetesVersion + "\n"},
	}}
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	conf := filepath.Join(n.Root, "fake-api.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q, insecure-skip-tls-verify: true}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n", srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}

	up := c.release("up.yaml", "v1.34.5", testbed.ModeImage(nodestate.Scheduler, "v1.34.5", ""))
	cmd := c.command("run", "--to="+up, "--kubeconfig="+conf, "--no-events")
	cmd.Path, cmd.Err = bin, nil // the binary with the fault points (build tag stratumfault)
	cmd.Env = append(os.Environ(), "STRATUM_FAULT="+string(fault.AfterCommit))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() >= 0 {
		t.Fatalf("run with STRATUM_FAULT=%s: %v, want killed\n%s", fault.AfterCommit, err, out)
	}
	if got := api.kubernetesVersion(); got != n.State.KubernetesVersion {
		t.Fatalf("kubernetesVersion %s after the crash, want still %s (the crash came first)", got, n.State.KubernetesVersion)
	}
	c.want(cli.ExitOK, "resume", "--kubeconfig="+conf, "--no-events")
	if got := api.kubernetesVersion(); got != "v1.34.5" {
		t.Errorf("kubernetesVersion %s after the next command, want v1.34.5: the update the commit owed was lost in the crash", got)
	}
	// Done once: a later command owes nothing and writes nothing.
	rv := api.version()
	c.want(cli.ExitOK, "resume", "--kubeconfig="+conf, "--no-events")
	if api.version() != rv {
		t.Errorf("a command after the update wrote kubeadm-config again")
	}
}
