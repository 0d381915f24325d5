package main

// The cluster's API server told of transactions (package kubeapi through
// the command): the real kube-apiserver of the test bed's real control
// plane (make test-real), read back as kubectl reads it.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/internal/cli"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/kubeapi"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// realEtcdOf is the etcd each Kubernetes version runs with here: the one
// its kubeadm pins.
var realEtcdOf = map[string]string{"v1.36.3": "registry.k8s.io/etcd:3.6.16-0", "v1.37.2": "registry.k8s.io/etcd:3.7.3-0"}

// needRealAPI skips t unless STRATUM_REAL is set (make test-real).
func needRealAPI(t *testing.T) {
	t.Helper()
	if testing.Short() || os.Getenv("STRATUM_REAL") == "" {
		t.Skip("needs the real control plane: make test-real runs it (STRATUM_REAL=1)")
	}
}

// secondDocument is a document beside the ClusterConfiguration in the
// ConfigMap's value, which the update must keep.
const secondDocument = "apiVersion: example.com/v1\nkind: SiteNotes\nowner: platform-team\n"

// TestRealKubeAPI: on the real control plane, an upgrade through the
// command leaves every Event of its commit on the Node, the outcome
// annotations, and kubeadm-config's ClusterConfiguration at the new
// versions (read back by the real kubeadm, every other field, key and
// document kept); --no-events and --no-kubeadm-config send nothing; an
// update owed while the API server did not answer is done by the next
// command; a rollback leaves every Event of its own.
func TestRealKubeAPI(t *testing.T) {
	needRealAPI(t)
	from, to := kubebuild.Versions[0], kubebuild.Versions[len(kubebuild.Versions)-1]
	n := testbed.Start(t, testbed.Options{StateFile: "testdata/states/real.yaml", Real: true, ActiveTimeout: 3 * time.Minute,
		Mutate: func(st *nodestate.NodeState) {
			st.KubernetesVersion = from
			for _, c := range kubebuild.Components {
				st.Images[c] = testbed.Repos[c] + ":" + from
			}
			st.Images[nodestate.Etcd] = realEtcdOf[from]
		}})
	c := &cliNode{t: t, node: n, stateDir: filepath.Join(n.Root, "stratum"), metrics: filepath.Join(n.Root, "stratum-upgrade.prom")}
	c.want(cli.ExitOK, "init", "--state="+n.StateFile)
	// The test reads the cluster as kubectl does: client-go's typed client.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(n.State.KubeconfigDir, "admin.conf"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := corev1client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	waitAPI(t, cs)
	// kubelet registers its Node; the test bed has no kubelet that does.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.State.NodeName},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.State.AdvertiseAddress}}}}
	if _, err := cs.Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cc := kubeadmClusterConfiguration(t, from)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: kubeapi.ConfigMapNamespace, Name: kubeapi.ConfigMapName},
		Data: map[string]string{kubeapi.ConfigMapKey: cc + "---\n" + secondDocument, "SiteKey": "kept"}}
	if _, err := cs.ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slow := []string{"--replace-timeout=60s", "--active-timeout=90s"}

	// 1. An upgrade commits: its Events, the annotations, kubeadm-config.
	// etcd stays (rollback --last below cannot move it down a minor);
	// kubeadm-config then pins it, where kubeadm of the new version would
	// otherwise pick its own.
	etcd := realEtcdOf[from]
	rel := filepath.Join(n.Root, "release-"+to+".yaml")
	doc := "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: " + to + "\nimages:\n"
	for _, comp := range kubebuild.Components {
		doc += "  " + comp + ": " + testbed.Repos[comp] + ":" + to + "\n"
	}
	if err := os.WriteFile(rel, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	c.want(cli.ExitOK, append([]string{"run", "--to=" + rel}, slow...)...)
	txn1 := lastTxn(t, c)
	want := []string{"TransactionBegan"}
	for _, comp := range kubebuild.Components {
		want = append(want, "ComponentReplaced:"+comp)
	}
	want = append(want, "TransactionCommitted")
	checkEvents(t, cs, n.State.NodeName, txn1, want)
	checkAnnotations(t, cs, n.State.NodeName, txn1, "committed", to)
	data := kubeadmConfig(t, cs)
	checkClusterConfiguration(t, data, cc, to, etcd)
	if m, err := kubeapi.LoadMark(c.stateDir); err != nil || m == nil || m.Txn != txn1 {
		t.Errorf("the kubeadm-config mark after the update: %+v %v, want %s", m, err, txn1)
	}

	// 2. Both flags off: the upgrade undone (a commit back to the old
	// versions) sends nothing and records nothing.
	// (kube-controller-manager posts RegisteredNode Events of its own.)
	ours := func() int {
		k := 0
		for _, ev := range nodeEvents(t, cs, n.State.NodeName) {
			if ev.Source.Component == kubeapi.Component {
				k++
			}
		}
		return k
	}
	before := ours()
	c.want(cli.ExitOK, append([]string{"rollback", "--last", "--no-events", "--no-kubeadm-config"}, slow...)...)
	if after := ours(); after != before {
		t.Errorf("--no-events: %d Events from %s after the rollback --last, %d before", after, kubeapi.Component, before)
	}
	checkAnnotations(t, cs, n.State.NodeName, txn1, "committed", to)
	if got := clusterConfigurationOf(t, kubeadmConfig(t, cs)); got["kubernetesVersion"] != to {
		t.Errorf("--no-kubeadm-config: kubernetesVersion %v, want left at %s", got["kubernetesVersion"], to)
	}
	if m, _ := kubeapi.LoadMark(c.stateDir); m == nil || m.Txn != lastTxn(t, c) {
		t.Errorf("--no-kubeadm-config: the mark %+v does not name the commit: a later command would update kubeadm-config", m)
	}

	// 3. The API server does not answer: the update is recorded; the next
	// command that reaches it does it.
	staleConfig(t, cs, from)
	down := filepath.Join(n.Root, "down.conf")
	conf := readFile(t, filepath.Join(n.State.KubeconfigDir, "admin.conf"))
	conf = strings.Replace(conf, "server: https://", "server: https://127.0.0.1:1#", 1)
	if err := os.WriteFile(down, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c.want(cli.ExitOK, append([]string{"run", "--to=" + rel, "--kubeconfig=" + down}, slow...)...)
	if m, err := kubeapi.LoadMark(c.stateDir); err != nil || m == nil || m.Txn == lastTxn(t, c) {
		t.Fatalf("after a commit with the API server down, the mark is %+v %v: the update is not owed", m, err)
	}
	if got := clusterConfigurationOf(t, kubeadmConfig(t, cs)); got["kubernetesVersion"] != from {
		t.Errorf("kubernetesVersion %v with the API server down, want still %s", got["kubernetesVersion"], from)
	}
	c.want(cli.ExitOK, "resume")
	checkClusterConfiguration(t, kubeadmConfig(t, cs), cc, to, etcd)
	if m, _ := kubeapi.LoadMark(c.stateDir); m == nil || m.Versions.KubernetesVersion != to {
		t.Errorf("the mark %+v after resume did the update", m)
	}

	// 4. A rollback: its Events and the annotations. The new scheduler
	// refuses a feature gate it does not know and exits. The bad state is
	// the committed one (its images and the --permit-port-sharing the
	// upgrade added) with that one flag more, so only the scheduler changes.
	bad := journalState(t, c)
	if bad.KubernetesVersion != to {
		t.Fatalf("the committed node state is %s, want %s", bad.KubernetesVersion, to)
	}
	bad.SetExtraArg(nodestate.Scheduler, "feature-gates", "NoSuchGate=true")
	badFile := filepath.Join(n.Root, "bad-state.yaml")
	if err := bad.Save(badFile); err != nil {
		t.Fatal(err)
	}
	// --no-surge: the scheduler's manifest is replaced, so its restore has
	// an Event (a surge copy that fails is removed; the manifest never
	// changed and nothing is restored).
	c.want(cli.ExitRolledBack, "apply", "--state="+badFile, "--no-surge", "--replace-timeout=60s", "--active-timeout=20s")
	txn2 := lastTxn(t, c)
	checkEvents(t, cs, n.State.NodeName, txn2, []string{"TransactionBegan", "RollingBack", "ComponentRestored:" + nodestate.Scheduler, "TransactionRolledBack"})
	checkAnnotations(t, cs, n.State.NodeName, txn2, "rolled-back", to)
}

// waitAPI waits for the API server to serve the Node API.
func waitAPI(t *testing.T, cs corev1client.CoreV1Interface) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := cs.Nodes().List(t.Context(), metav1.ListOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server did not serve Nodes within 2m: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// lastTxn is the id of the node's last transaction, from history -o json.
func lastTxn(t *testing.T, c *cliNode) string {
	t.Helper()
	out := c.want(cli.ExitOK, "history", "--limit=1", "-o", "json")
	var h struct {
		Transactions []struct {
			ID string `json:"id"`
		} `json:"transactions"`
	}
	if err := yaml.Unmarshal([]byte(out), &h); err != nil || len(h.Transactions) != 1 || h.Transactions[0].ID == "" {
		t.Fatalf("history -o json: %v\n%s", err, out)
	}
	return h.Transactions[0].ID
}

// nodeEvents are the Events on Node name, oldest first, as `kubectl get
// events --field-selector involvedObject.kind=Node,involvedObject.name=NAME`.
func nodeEvents(t *testing.T, cs corev1client.CoreV1Interface, name string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": name}.AsSelector().String()
	list, err := cs.Events(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Event) int { return a.FirstTimestamp.Compare(b.FirstTimestamp.Time) })
	return list.Items
}

// checkEvents checks that the Events of txn on Node name are want, in
// order ("Reason" or "Reason:component", the component named in the
// message), each from stratum-upgrade with the transaction's id.
func checkEvents(t *testing.T, cs corev1client.CoreV1Interface, name, txn string, want []string) {
	t.Helper()
	var got []string
	for _, ev := range nodeEvents(t, cs, name) {
		if ev.Annotations[kubeapi.AnnotationEventTxn] != txn {
			continue
		}
		if ev.Source.Component != kubeapi.Component || !strings.Contains(ev.Message, txn) {
			t.Errorf("event %s %q: source %q, want %s and the transaction id", ev.Reason, ev.Message, ev.Source.Component, kubeapi.Component)
		}
		warn := ev.Type == corev1.EventTypeWarning
		if warn != slices.Contains([]string{"RollingBack", "TransactionRolledBack", "RollbackFailed"}, ev.Reason) {
			t.Errorf("event %s is of type %s", ev.Reason, ev.Type)
		}
		r := ev.Reason
		if strings.HasPrefix(r, "Component") {
			for _, comp := range []string{nodestate.Etcd, nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
				if strings.Contains(ev.Message, ": "+comp+" ") {
					r += ":" + comp
				}
			}
		}
		got = append(got, r)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Events of %s on Node %s:\n got %v\nwant %v", txn, name, got, want)
	}
}

func checkAnnotations(t *testing.T, cs corev1client.CoreV1Interface, name, txn, outcome, release string) {
	t.Helper()
	node, err := cs.Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := node.Annotations
	if a[kubeapi.AnnotationTransaction] != txn || a[kubeapi.AnnotationOutcome] != outcome || a[kubeapi.AnnotationRelease] != release {
		t.Errorf("Node %s annotations %v, want transaction %s, outcome %s, release %s", name, a, txn, outcome, release)
	}
}

func kubeadmConfig(t *testing.T, cs corev1client.CoreV1Interface) map[string]string {
	t.Helper()
	cm, err := cs.ConfigMaps(kubeapi.ConfigMapNamespace).Get(t.Context(), kubeapi.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

// clusterConfigurationOf is the ClusterConfiguration document of data,
// decoded; it fails t unless the second document is still there.
func clusterConfigurationOf(t *testing.T, data map[string]string) map[string]any {
	t.Helper()
	docs := strings.Split(data[kubeapi.ConfigMapKey], "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents in %s, want 2:\n%s", len(docs), kubeapi.ConfigMapKey, data[kubeapi.ConfigMapKey])
	}
	var second map[string]any
	if err := yaml.Unmarshal([]byte(docs[1]), &second); err != nil || second["kind"] != "SiteNotes" || second["owner"] != "platform-team" {
		t.Errorf("the second document is %v (%v), want kept", second, err)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(docs[0]), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkClusterConfiguration checks that the ClusterConfiguration of data
// is orig with kubernetesVersion kube and etcd's imageTag etcd's, every
// other field kept, and that the real kubeadm of version kube reads from
// it the images the node runs.
func checkClusterConfiguration(t *testing.T, data map[string]string, orig, kube, etcd string) {
	t.Helper()
	if data["SiteKey"] != "kept" {
		t.Errorf("the ConfigMap's other key is %q, want kept", data["SiteKey"])
	}
	got := clusterConfigurationOf(t, data)
	var want map[string]any
	if err := yaml.Unmarshal([]byte(orig), &want); err != nil {
		t.Fatal(err)
	}
	want["kubernetesVersion"] = kube
	local := want["etcd"].(map[string]any)["local"].(map[string]any)
	local["imageTag"] = etcd[strings.LastIndex(etcd, ":")+1:]
	g, _ := yaml.Marshal(got)
	w, _ := yaml.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("ClusterConfiguration:\n%s\nwant:\n%s", g, w)
	}
	kubeadm, err := kubebuild.Kubeadm(t.Context(), kube)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(f, []byte(strings.Split(data[kubeapi.ConfigMapKey], "\n---\n")[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubeadm, "config", "images", "list", "--config", f).CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm config images list: %v\n%s", err, out)
	}
	for _, img := range []string{"registry.k8s.io/kube-apiserver:" + kube, "registry.k8s.io/kube-scheduler:" + kube, etcd} {
		if !slices.Contains(strings.Fields(string(out)), img) {
			t.Errorf("kubeadm %s reads images %s from the ClusterConfiguration, want %s among them", kube, out, img)
		}
	}
}

// kubeadmClusterConfiguration is the ClusterConfiguration the real kubeadm
// of version kube writes by default (`kubeadm config print
// init-defaults`), at kube, as its uploadconfig phase stores it.
func kubeadmClusterConfiguration(t *testing.T, kube string) string {
	t.Helper()
	kubeadm, err := kubebuild.Kubeadm(t.Context(), kube)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubeadm, "config", "print", "init-defaults").Output()
	if err != nil {
		t.Fatalf("kubeadm config print init-defaults: %v", err)
	}
	for _, d := range strings.Split(string(out), "---\n") {
		if strings.Contains(d, "kind: ClusterConfiguration") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(d), &m); err != nil {
				t.Fatal(err)
			}
			m["kubernetesVersion"] = kube
			m["clusterName"] = "prod"
			b, err := yaml.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatalf("kubeadm config print init-defaults has no ClusterConfiguration:\n%s", out)
	return ""
}

// staleConfig sets kubeadm-config's kubernetesVersion from the newest
// version back to kube.
func staleConfig(t *testing.T, cs corev1client.CoreV1Interface, kube string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cm, err := cs.ConfigMaps(kubeapi.ConfigMapNamespace).Get(ctx, kubeapi.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[kubeapi.ConfigMapKey] = strings.Replace(cm.Data[kubeapi.ConfigMapKey], "kubernetesVersion: "+kubebuild.Versions[len(kubebuild.Versions)-1], "kubernetesVersion: "+kube, 1)
	if _, err := cs.ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
