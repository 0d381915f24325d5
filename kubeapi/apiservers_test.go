package kubeapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// cpNode is a control-plane Node by kubeadm's label.
func cpNode(name, ip string) *corev1.Node {
	n := node(name, ip)
	n.Labels = map[string]string{LabelControlPlane: ""}
	return n
}

// apiServerPod is kubelet's mirror pod of kube-apiserver on node, from
// the manifest's image spec, running the image status ("" for none yet).
func apiServerPod(node, spec, status string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-apiserver-" + node,
			Labels: map[string]string{LabelComponent: "kube-apiserver"}, Annotations: map[string]string{AnnotationMirrorPod: "x"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "kube-apiserver", Image: spec}}},
	}
	if status != "" {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-apiserver", Image: status}}
	}
	return p
}

// TestAPIServersForSkew: each control-plane node's kube-apiserver versions are
// those of its mirror pod's images, running and to run; a node whose
// pod is missing or names no version is unread with the reason; a worker
// is not a control-plane node, a node running a kube-apiserver mirror pod
// is one without the label, and a pod that is not a mirror pod is not
// what kubelet runs from the manifest.
func TestAPIServersForSkew(t *testing.T) {
	const img = "registry.k8s.io/kube-apiserver:"
	notMirror := apiServerPod("cp-6", img+"v1.35.4", "")
	notMirror.Annotations = nil
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want []APIServer
	}{
		{name: "running what the manifest says", objs: []runtime.Object{cpNode("cp-1", "10.0.0.11"), apiServerPod("cp-1", img+"v1.34.5", img+"v1.34.5")},
			want: []APIServer{{Node: "cp-1", Address: "10.0.0.11", Versions: []string{"v1.34.5"}}}},
		{name: "mid-replacement", objs: []runtime.Object{cpNode("cp-1", "10.0.0.11"), apiServerPod("cp-1", img+"v1.36.3@sha256:ab", img+"v1.35.4")},
			want: []APIServer{{Node: "cp-1", Address: "10.0.0.11", Versions: []string{"v1.35.4", "v1.36.3"}}}},
		{name: "a pod not started yet", objs: []runtime.Object{cpNode("cp-1", "10.0.0.11"), apiServerPod("cp-1", img+"v1.35.4", "")},
			want: []APIServer{{Node: "cp-1", Address: "10.0.0.11", Versions: []string{"v1.35.4"}}}},
		{name: "no mirror pod", objs: []runtime.Object{cpNode("cp-2", "10.0.0.12"), node("worker-1", "10.0.1.1")},
			want: []APIServer{{Node: "cp-2", Address: "10.0.0.12", Unread: "no kube-apiserver mirror pod on it in kube-system"}}},
		{name: "pinned by digest", objs: []runtime.Object{cpNode("cp-3", ""), apiServerPod("cp-3", "registry.k8s.io/kube-apiserver@sha256:ab", "sha256:cd")},
			want: []APIServer{{Node: "cp-3", Unread: "the image of its mirror pod kube-apiserver-cp-3 names no version"}}},
		{name: "no label", objs: []runtime.Object{node("cp-4", "10.0.0.14"), apiServerPod("cp-4", img+"v1.35.4", img+"v1.35.4")},
			want: []APIServer{{Node: "cp-4", Address: "10.0.0.14", Versions: []string{"v1.35.4"}}}},
		{name: "not a mirror pod", objs: []runtime.Object{cpNode("cp-6", "10.0.0.16"), notMirror},
			want: []APIServer{{Node: "cp-6", Address: "10.0.0.16", Unread: "no kube-apiserver mirror pod on it in kube-system"}}},
		{name: "no control plane", objs: []runtime.Object{node("worker-1", "10.0.1.1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := APIServers(t.Context(), fakeAPI(tc.objs...))
			if err != nil || !slices.EqualFunc(got, tc.want, func(a, b APIServer) bool {
				return a.Node == b.Node && a.Address == b.Address && slices.Equal(a.Versions, b.Versions) && a.Unread == b.Unread
			}) {
				t.Fatalf("APIServers: %+v %v\nwant %+v", got, err, tc.want)
			}
		})
	}
}

// TestAPIServersForSkewErrors: an API server that does not answer is
// ErrUnanswered (ask again later); one that refuses is its answer.
func TestAPIServersForSkewErrors(t *testing.T) {
	if _, err := APIServers(t.Context(), downAPI(t)); !errors.Is(err, ErrUnanswered) {
		t.Errorf("API down: %v, want ErrUnanswered", err)
	}
	cs := fake.NewClientset(cpNode("cp-1", "10.0.0.11"))
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	})
	if _, err := APIServers(t.Context(), typed{cs.CoreV1()}); err == nil || errors.Is(err, ErrUnanswered) || !apierrors.IsForbidden(err) {
		t.Errorf("pods forbidden: %v, want the refusal", err)
	}
}

// TestClientListPodsForSkew: the real client asks the API server for the
// pods by label, and decodes its list.
func TestClientListPodsForSkew(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body any = &corev1.NodeList{Items: []corev1.Node{*cpNode("cp-1", "10.0.0.11")}}
		switch {
		case r.URL.Path == "/api/v1/namespaces/kube-system/pods" && r.URL.Query().Get("labelSelector") == "component=kube-apiserver":
			body = &corev1.PodList{Items: []corev1.Pod{*apiServerPod("cp-1", "registry.k8s.io/kube-apiserver:v1.35.4", "")}}
		case r.URL.Path != "/api/v1/nodes":
			http.Error(w, r.URL.String(), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	defer srv.Close()
	got, err := APIServers(t.Context(), clientOf(t, srv.URL, true))
	if err != nil || len(got) != 1 || !slices.Equal(got[0].Versions, []string{"v1.35.4"}) {
		t.Fatalf("APIServers through the client: %+v %v", got, err)
	}
}
