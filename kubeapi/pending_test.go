package kubeapi

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// TestSyncDefersUntilTheAPIAnswers: a recorded update stays while the API
// server does not answer (or there is no kubeconfig), is done by the first
// Sync that reaches it and then forgotten; a cluster without kubeadm-config
// forgets it too; a ClusterConfiguration that cannot be edited keeps it.
func TestSyncDefersUntilTheAPIAnswers(t *testing.T) {
	ctx := t.Context()
	v := ClusterVersions{KubernetesVersion: "v1.37.2", ImageRepository: "registry.k8s.io", EtcdImage: "registry.k8s.io/etcd:3.7.3-0"}
	dir := t.TempDir()
	if got, _, err := Sync(ctx, downAPI(t), dir); got != NoneOwed || err != nil {
		t.Fatalf("nothing recorded: %s %v", got, err)
	}
	if err := SavePending(dir, Pending{Txn: "t1", Versions: v, Recorded: time.Now()}); err != nil {
		t.Fatal(err)
	}
	owed := func() *Pending {
		t.Helper()
		p, err := LoadPending(dir)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, cs := range map[string]API{"no kubeconfig": nil, "API down": downAPI(t)} {
		got, _, err := Sync(ctx, cs, dir)
		if got != Deferred || (cs != nil && err == nil) {
			t.Errorf("%s: %s %v, want deferred with the error", name, got, err)
		}
		if p := owed(); p == nil || p.Txn != "t1" || p.Versions != v {
			t.Errorf("%s: the record is %+v, want kept", name, p)
		}
	}

	broken := fakeAPI(kubeadmConfigMap(map[string]string{"other": "x"}))
	if got, _, err := Sync(ctx, broken, dir); got != Refused || !errors.Is(err, ErrClusterConfiguration) || owed() == nil {
		t.Errorf("no ClusterConfiguration key: %s %v (record %+v), want refused and kept", got, err, owed())
	}

	cs := fakeAPI(kubeadmConfigMap(map[string]string{ConfigMapKey: uploaded, "kept": "yes"}))
	if got, _, err := Sync(ctx, cs, dir); got != Updated || err != nil {
		t.Fatalf("API up: %s %v, want updated", got, err)
	}
	if p := owed(); p != nil {
		t.Errorf("the record %+v stays after the update", p)
	}
	cm, err := cs.c.ConfigMaps(ConfigMapNamespace).Get(ctx, ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cc := decode(t, cm.Data[ConfigMapKey]); cc["kubernetesVersion"] != "v1.37.2" || cc["clusterName"] != "prod" || cm.Data["kept"] != "yes" {
		t.Errorf("ConfigMap after the update: %v", cm.Data)
	}

	if err := SavePending(dir, Pending{Txn: "t2", Versions: v}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := Sync(ctx, fakeAPI(), dir); got != NotKubeadm || err != nil || owed() != nil {
		t.Errorf("no kubeadm-config: %s %v (record %+v), want not-kubeadm and forgotten", got, err, owed())
	}
}

// TestLoadPendingRefusesDamage: a record that is not one is an error
// naming the file, not a silent skip.
func TestLoadPendingRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, PendingFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPending(dir); err == nil {
		t.Fatal("a damaged record loaded")
	}
}

// TestConnectWithoutKubeconfig: no file, ErrNoKubeconfig.
func TestConnectWithoutKubeconfig(t *testing.T) {
	if _, err := Connect(filepath.Join(t.TempDir(), "admin.conf")); !errors.Is(err, ErrNoKubeconfig) {
		t.Fatalf("%v, want ErrNoKubeconfig", err)
	}
}
