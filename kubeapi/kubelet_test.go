package kubeapi

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// kubeletNode is a Node whose kubelet reports version v.
func kubeletNode(name, ip, v string) *corev1.Node {
	n := node(name, ip)
	n.Status.NodeInfo.KubeletVersion = v
	return n
}

// TestKubeletVersion: the kubelet version is the one this node's Node
// reports (found by name, or else by address), not another node's; a
// Node with none, no Node, and a refusal are errors that are not
// ErrUnanswered, and an API server that does not answer is.
func TestKubeletVersion(t *testing.T) {
	cs := fakeAPI(kubeletNode("cp-1", "10.0.0.11", "v1.34.4"), kubeletNode("cp-2", "10.0.0.12", "v1.35.4"), node("cp-3", "10.0.0.13"))
	for _, ref := range []NodeRef{{Name: "cp-1", Address: "10.0.0.11"}, {Name: "etcd-member-name", Address: "10.0.0.11"}} {
		if v, err := KubeletVersion(t.Context(), cs, ref); err != nil || v != "v1.34.4" {
			t.Errorf("%+v: %q %v, want v1.34.4", ref, v, err)
		}
	}
	if _, err := KubeletVersion(t.Context(), cs, NodeRef{Name: "cp-3"}); !errors.Is(err, ErrNoKubeletVersion) {
		t.Errorf("a Node without a kubelet version: %v, want ErrNoKubeletVersion", err)
	}
	if _, err := KubeletVersion(t.Context(), cs, NodeRef{Name: "cp-9", Address: "10.0.0.19"}); err == nil || errors.Is(err, ErrUnanswered) {
		t.Errorf("no such Node: %v, want an error, not ErrUnanswered", err)
	}
	if _, err := KubeletVersion(t.Context(), downAPI(t), NodeRef{Name: "cp-1"}); !errors.Is(err, ErrUnanswered) {
		t.Errorf("API down: %v, want ErrUnanswered", err)
	}
	fc := fake.NewClientset(kubeletNode("cp-1", "10.0.0.11", "v1.34.4"))
	fc.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "cp-1", errors.New("no"))
	})
	if _, err := KubeletVersion(t.Context(), typed{fc.CoreV1()}, NodeRef{Name: "cp-1"}); err == nil || errors.Is(err, ErrUnanswered) || !apierrors.IsForbidden(err) {
		t.Errorf("nodes forbidden: %v, want the refusal", err)
	}
}
