package kubeapi

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// typed is API over client-go's typed core/v1 client: the tests' view of
// client-go's fake clientset, an object tracker with the API server's
// semantics for these calls (NotFound, merge patches, resource versions).
type typed struct{ c corev1client.CoreV1Interface }

// fakeAPI is an API over client-go's fake clientset holding objs.
func fakeAPI(objs ...runtime.Object) typed { return typed{fake.NewClientset(objs...).CoreV1()} }

func (t typed) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return t.c.Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (t typed) ListNodes(ctx context.Context) (*corev1.NodeList, error) {
	return t.c.Nodes().List(ctx, metav1.ListOptions{})
}

func (t typed) ListPods(ctx context.Context, namespace, selector string) (*corev1.PodList, error) {
	return t.c.Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
}

func (t typed) PatchNode(ctx context.Context, name string, patch []byte) error {
	_, err := t.c.Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (t typed) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	_, err := t.c.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

func (t typed) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return t.c.ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (t typed) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	_, err := t.c.ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}
