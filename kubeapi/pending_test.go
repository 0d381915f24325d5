package kubeapi

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// downAPI is a client of an API server that does not answer: the
// kubeconfig names a port nothing listens on.
func downAPI(t *testing.T) API {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return clientOf(t, "https://"+addr, true)
}

// clientOf is a client of the API server at url, through a kubeconfig that
// trusts the system's CAs, or any certificate with insecure.
func clientOf(t *testing.T, url string, insecure bool) API {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin.conf")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: url, InsecureSkipTLSVerify: insecure}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	cs, err := Connect(path)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func kubeadmConfigMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ConfigMapNamespace, Name: ConfigMapName}, Data: data}
}

// TestSyncDefersUntilTheAPIAnswers: the last change stays owed while the
// API server does not answer (or there is no kubeconfig), is done by the
// first Sync that reaches it and then marked; a cluster without
// kubeadm-config marks it too; a ClusterConfiguration that cannot be
// edited leaves it owed. Without a mark, Baseline makes one that owes
// nothing of the commits so far.
func TestSyncDefersUntilTheAPIAnswers(t *testing.T) {
	ctx := t.Context()
	v := ClusterVersions{KubernetesVersion: "v1.37.2", ImageRepository: "registry.k8s.io", EtcdImage: "registry.k8s.io/etcd:3.7.3-0"}
	dir := t.TempDir()
	t0 := &Change{Txn: "t0", Versions: ClusterVersions{KubernetesVersion: "v1.36.3"}}
	if err := Baseline(dir, t0); err != nil {
		t.Fatal(err)
	}
	if got, _, err := Sync(ctx, downAPI(t), dir, t0); got != NoneOwed || err != nil {
		t.Fatalf("the baseline's change: %s %v, want none owed", got, err)
	}
	if got, _, err := Sync(ctx, downAPI(t), dir, nil); got != NoneOwed || err != nil {
		t.Fatalf("no change: %s %v", got, err)
	}
	t1 := &Change{Txn: "t1", Versions: v}
	owed := func() *Change {
		t.Helper()
		c, err := Owed(dir, t1)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for name, cs := range map[string]API{"no kubeconfig": nil, "API down": downAPI(t)} {
		got, _, err := Sync(ctx, cs, dir, t1)
		if got != Deferred || (cs != nil && err == nil) {
			t.Errorf("%s: %s %v, want deferred with the error", name, got, err)
		}
		if c := owed(); c == nil || *c != *t1 {
			t.Errorf("%s: owed %+v, want still t1", name, c)
		}
	}

	broken := fakeAPI(kubeadmConfigMap(map[string]string{"other": "x"}))
	if got, _, err := Sync(ctx, broken, dir, t1); got != Refused || !errors.Is(err, ErrClusterConfiguration) || owed() == nil {
		t.Errorf("no ClusterConfiguration key: %s %v (owed %+v), want refused and still owed", got, err, owed())
	}

	cs := fakeAPI(kubeadmConfigMap(map[string]string{ConfigMapKey: uploaded, "kept": "yes"}))
	if got, _, err := Sync(ctx, cs, dir, t1); got != Updated || err != nil {
		t.Fatalf("API up: %s %v, want updated", got, err)
	}
	if c := owed(); c != nil {
		t.Errorf("%+v still owed after the update", c)
	}
	if m, err := LoadMark(dir); err != nil || m == nil || m.Change != *t1 {
		t.Errorf("the mark after the update: %+v %v, want t1", m, err)
	}
	cm, err := cs.c.ConfigMaps(ConfigMapNamespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cc := decode(t, cm.Data[ConfigMapKey]); cc["kubernetesVersion"] != "v1.37.2" || cc["clusterName"] != "prod" || cm.Data["kept"] != "yes" {
		t.Errorf("ConfigMap after the update: %v", cm.Data)
	}
	if err := Baseline(dir, &Change{Txn: "t9"}); err != nil {
		t.Fatal(err)
	}
	if m, _ := LoadMark(dir); m == nil || m.Txn != "t1" {
		t.Errorf("Baseline over a mark replaced it: %+v", m)
	}

	t2 := &Change{Txn: "t2", Versions: v}
	if got, _, err := Sync(ctx, fakeAPI(), dir, t2); got != NotKubeadm || err != nil {
		t.Errorf("no kubeadm-config: %s %v, want not-kubeadm", got, err)
	}
	if c, _ := Owed(dir, t2); c != nil {
		t.Errorf("no kubeadm-config: %+v still owed", c)
	}
}

// TestLoadMarkRefusesDamage: a mark that is not one is an error naming
// the file, not a silent skip.
func TestLoadMarkRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SyncedFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadMark(dir); err == nil {
		t.Fatal("a damaged mark loaded")
	}
}

// TestConnectWithoutKubeconfig: no file, ErrNoKubeconfig.
func TestConnectWithoutKubeconfig(t *testing.T) {
	if _, err := Connect(filepath.Join(t.TempDir(), "admin.conf")); !errors.Is(err, ErrNoKubeconfig) {
		t.Fatalf("%v, want ErrNoKubeconfig", err)
	}
}
