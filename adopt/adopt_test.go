package adopt

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeadmgen"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// fixtures are the real kubeadm's manifests (testdata/kubeadm, made and
// checked by make kubeadm-fixtures and make test-real): version/config.
func fixtures(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("..", "testdata", "kubeadm", "v*", "*"))
	if err != nil || len(dirs) < 8 {
		t.Fatalf("kubeadm fixtures: %v %v: want 2 versions x 4 configurations", dirs, err)
	}
	// Those the node state cannot yet express are expected to restart
	// (kubeadmgen.TestAdoptFixtures fails once they no longer do).
	return slices.DeleteFunc(dirs, func(d string) bool {
		why, ok := kubeadmgen.NeedsModel[filepath.Base(d)]
		if ok {
			t.Logf("%s: left out, kubeadmgen.NeedsModel: %s", d, why)
		}
		return ok
	})
}

func check(t *testing.T, dir string) *Plan {
	t.Helper()
	src, err := ReadKubeadm(filepath.Join(dir, "manifests"), filepath.Join(dir, "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Check(src)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Every configuration the real kubeadm renders adopts without a restart:
// the render of the derived state is, to kubelet, the pod it runs.
func TestKubeadmFixturesAdoptWithoutRestart(t *testing.T) {
	for _, dir := range fixtures(t) {
		t.Run(filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir), func(t *testing.T) {
			p := check(t, dir)
			for _, v := range p.Components {
				if v.Restarts {
					t.Errorf("%s would restart: %s", v.Name, strings.Join(v.Why, "; "))
				}
			}
			if len(p.Notes) > 0 {
				t.Errorf("kubeadm's configuration disagrees with its manifests: %v", p.Notes)
			}
			if err := p.State.Validate(); err != nil {
				t.Error(err)
			}
			if got := len(p.State.AdoptedInputs); got != 4 {
				t.Errorf("adoptedInputs has %d components, want 4", got)
			}
		})
	}
}

// What each configuration's state says, field by field.
func TestKubeadmFixturesDerive(t *testing.T) {
	for _, version := range []string{"v1.36.3", "v1.37.2"} {
		dir := func(c string) string { return filepath.Join("..", "testdata", "kubeadm", version, c) }
		st := check(t, dir("defaults")).State
		if st.NodeName != "cp-1" || st.AdvertiseAddress != "10.0.0.11" || st.KubernetesVersion != version ||
			st.PKIDir != "/etc/kubernetes/pki" || st.KubeconfigDir != "/etc/kubernetes" || st.Etcd.DataDir != "/var/lib/etcd" ||
			st.Networking.PodCIDR != nodestate.NoPodCIDR || st.Networking.DNSDomain != "cluster.local" ||
			st.Ports.APIServer != 6443 || st.Etcd.InitialClusterState != "new" || len(st.ExtraArgs) != 0 {
			t.Errorf("%s defaults: %+v", version, st)
		}
		st = check(t, dir("custom-paths")).State
		if st.PKIDir != "/srv/kubernetes/pki" || st.Etcd.DataDir != "/srv/etcd/data" || st.Ports.APIServer != 8443 ||
			st.Networking.ServiceCIDR != "10.112.0.0/16" || st.Networking.PodCIDR != "192.168.0.0/16" ||
			st.Networking.DNSDomain != "k8s.internal" || len(st.ExtraArgs) != 0 ||
			!reflect.DeepEqual(st.CACertDirs, []string{"/etc/pki/ca-trust", "/etc/pki/tls/certs"}) {
			t.Errorf("%s custom-paths: %+v", version, st)
		}
		st = check(t, dir("joined")).State
		if st.Etcd.InitialClusterState != "existing" || strings.Count(st.Etcd.InitialCluster, "=https://") != 3 {
			t.Errorf("%s joined: etcd %+v", version, st.Etcd)
		}
		st = check(t, dir("extra-args")).State
		want := map[string][]string{
			nodestate.Etcd:              {"quota-backend-bytes", "listen-metrics-urls"},
			nodestate.KubeAPIServer:     {"audit-log-maxage", "profiling", "service-node-port-range"},
			nodestate.ControllerManager: {"bind-address", "profiling", "terminated-pod-gc-threshold"},
			nodestate.Scheduler:         {"bind-address", "profiling"},
		}
		if !reflect.DeepEqual(st.ExtraArgsOrder, want) || !slices.Equal(st.ExtraArgs[nodestate.Etcd]["listen-metrics-urls"], nodestate.ArgValues{"http://0.0.0.0:2381"}) {
			t.Errorf("%s extra-args: order %v args %v", version, st.ExtraArgsOrder, st.ExtraArgs)
		}
	}
}

// copyFixture copies a fixture's manifests and configuration into a
// directory the test may change.
func copyFixture(t *testing.T, version, config string) (manifests, cfg string) {
	t.Helper()
	from := filepath.Join("..", "testdata", "kubeadm", version, config)
	manifests = filepath.Join(t.TempDir(), "manifests")
	if err := os.CopyFS(manifests, os.DirFS(filepath.Join(from, "manifests"))); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(from, "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(t.TempDir(), "kubeadm.yaml")
	if err := os.WriteFile(cfg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return manifests, cfg
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// What cannot be adopted is refused, naming the cause; nothing here writes.
func TestReadKubeadmRefuses(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir, cfg string)
		want   string
	}{
		{"external etcd (no etcd.yaml)", func(t *testing.T, dir, _ string) { os.Remove(filepath.Join(dir, "etcd.yaml")) }, "external etcd"},
		{"external etcd (configuration)", func(t *testing.T, _, cfg string) {
			edit(t, cfg, "etcd:\n  local:\n    dataDir: /srv/etcd/data\n", "etcd:\n  external:\n    endpoints: [https://10.0.0.50:2379]\n")
		}, "external etcd"},
		{"a stray file", func(t *testing.T, dir, _ string) {
			os.WriteFile(filepath.Join(dir, "haproxy.yaml"), []byte("x"), 0o600)
		}, "haproxy.yaml is not a control-plane component's manifest"},
		{"a symlink", func(t *testing.T, dir, _ string) {
			p := filepath.Join(dir, "kube-scheduler.yaml")
			os.Rename(p, p+".real")
			os.Symlink(p+".real", p)
		}, "is a symlink"},
		{"a directory", func(t *testing.T, dir, _ string) { os.Mkdir(filepath.Join(dir, "old"), 0o700) }, "is a directory"},
		{"a pod named otherwise", func(t *testing.T, dir, _ string) {
			edit(t, filepath.Join(dir, "kube-scheduler.yaml"), "  name: kube-scheduler\n  namespace", "  name: scheduler\n  namespace")
		}, `holds pod "scheduler", not "kube-scheduler"`},
		{"no apiserver", func(t *testing.T, dir, _ string) { os.Remove(filepath.Join(dir, "kube-apiserver.yaml")) }, "has no kube-apiserver.yaml"},
		{"not a pod", func(t *testing.T, dir, _ string) {
			os.WriteFile(filepath.Join(dir, "kube-scheduler.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o600)
		}, "want apiVersion v1 kind Pod"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, cfg := copyFixture(t, "v1.37.2", "custom-paths")
			c.mutate(t, dir, cfg)
			_, err := ReadKubeadm(dir, cfg)
			if !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want ErrNotAdoptable saying %q", err, c.want)
			}
		})
	}
}

// A manifest edited by hand past what the state expresses is refused by
// Derive, or reported by Check as a restart with the difference named.
func TestHandEditsAreNamed(t *testing.T) {
	dir, cfg := copyFixture(t, "v1.37.2", "defaults")
	edit(t, filepath.Join(dir, "kube-apiserver.yaml"), "    - --advertise-address=10.0.0.11\n", "")
	src, err := ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(src); !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), "has no --advertise-address") {
		t.Errorf("Check = %v, want the missing flag named", err)
	}

	dir, cfg = copyFixture(t, "v1.37.2", "defaults")
	// An argument that is no --flag: no extra arg holds it, and a patch
	// may not change the command line.
	edit(t, filepath.Join(dir, "kube-scheduler.yaml"), "    - kube-scheduler\n", "    - kube-scheduler\n    - -v=4\n")
	// A flag added by hand is an extra arg: no restart.
	edit(t, filepath.Join(dir, "kube-controller-manager.yaml"), "    - --use-service-account-credentials=true\n", "    - --use-service-account-credentials=true\n    - --v=2\n")
	src, err = ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Check(src)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Restarts(); !slices.Equal(got, []string{nodestate.Scheduler}) {
		t.Fatalf("Restarts = %v, want kube-scheduler alone", got)
	}
	why := strings.Join(p.Components[3].Why, "; ")
	if !strings.Contains(why, "-v=4") {
		t.Errorf("why = %q, want the argument named", why)
	}
	if p.State.Patches != nil {
		t.Errorf("a patch was kept for an unexpressible difference: %+v", p.State.Patches)
	}
	if !slices.Equal(p.State.ExtraArgs[nodestate.ControllerManager]["v"], nodestate.ArgValues{"2"}) {
		t.Errorf("extra args %v, want the hand-added --v=2", p.State.ExtraArgs)
	}
}

// kubeadm's configuration only cross-checks: a disagreement is a note.
func TestConfigDisagreementIsANote(t *testing.T) {
	dir, cfg := copyFixture(t, "v1.37.2", "custom-paths")
	edit(t, cfg, "serviceSubnet: 10.112.0.0/16", "serviceSubnet: 10.113.0.0/16")
	src, err := ReadKubeadm(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Check(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Notes) != 1 || !strings.Contains(p.Notes[0], "networking.serviceSubnet") || p.State.Networking.ServiceCIDR != "10.112.0.0/16" {
		t.Errorf("notes %v, service CIDR %s: want one note and the manifests' value", p.Notes, p.State.Networking.ServiceCIDR)
	}
	if _, err := ReadKubeadmConfig(filepath.Join(t.TempDir(), "none.yaml")); err == nil {
		t.Error("a missing configuration file was read")
	}
	other := filepath.Join(t.TempDir(), "kubelet.yaml")
	os.WriteFile(other, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), 0o600)
	if _, err := ReadKubeadmConfig(other); err == nil || !strings.Contains(err.Error(), "no kubeadm.k8s.io document") {
		t.Errorf("a file without kubeadm's documents: %v", err)
	}
}

// kubeadm's defaults are applied before the cross-check: a field the
// configuration omits is compared as kubeadm filled it in; bindPort and
// dnsDomain are compared too. kubeadm's own defaults fixture gives no note.
func TestConfigDefaultsCrossChecked(t *testing.T) {
	notes := func(version, config string, edits ...string) []string {
		t.Helper()
		dir, cfg := copyFixture(t, version, config)
		for i := 0; i+1 < len(edits); i += 2 {
			edit(t, cfg, edits[i], edits[i+1])
		}
		src, err := ReadKubeadm(dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Check(src)
		if err != nil {
			t.Fatal(err)
		}
		return p.Notes
	}
	if n := notes("v1.37.2", "defaults"); len(n) != 0 {
		t.Errorf("kubeadm's defaults: notes %v", n)
	}
	for _, tc := range []struct{ old, new, field, says string }{
		{"  serviceSubnet: 10.112.0.0/16\n", "", "networking.serviceSubnet", "10.96.0.0/12, the manifests run 10.112.0.0/16"},
		{"  bindPort: 8443\n", "", "localAPIEndpoint.bindPort", "6443, the manifests run 8443"},
		{"dnsDomain: k8s.internal", "dnsDomain: cluster.example", "networking.dnsDomain", "cluster.example, the manifests run k8s.internal"},
		{"  dnsDomain: k8s.internal\n", "", "networking.dnsDomain", "cluster.local, the manifests run k8s.internal"},
		{"    dataDir: /srv/etcd/data\n", "", "etcd.local.dataDir", "/var/lib/etcd, the manifests run /srv/etcd/data"},
	} {
		n := notes("v1.37.2", "custom-paths", tc.old, tc.new)
		if len(n) != 1 || !strings.HasPrefix(n[0], tc.field+": ") || !strings.Contains(n[0], "says "+tc.field+" "+tc.says) {
			t.Errorf("custom-paths with %q -> %q: notes %v, want one: %s ... %s", tc.old, tc.new, n, tc.field, tc.says)
		}
	}
}
