// Package kubeapi is stratum-upgrade's one client of the cluster's API
// server: it posts a transaction's Events on the node's Node object, keeps
// the last outcome in the Node's annotations, and keeps kubeadm's
// ClusterConfiguration (the kube-system/kubeadm-config ConfigMap) at the
// versions the node runs. The node is upgraded through its manifest
// directory, never through the API: nothing here waits long on the API
// server or decides a transaction, and a failure is the caller's warning.
package kubeapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RequestTimeout bounds every request to the API server.
const RequestTimeout = 5 * time.Second

// ErrNoKubeconfig: the kubeconfig file does not exist, so there is no API
// server to tell.
var ErrNoKubeconfig = errors.New("no kubeconfig")

// API is what this package asks of the API server's core/v1 API. *Client
// is the real one; errors are client-go's (apierrors tells them apart).
type API interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListNodes(ctx context.Context) (*corev1.NodeList, error)
	// ListPods is the Pods in namespace that the label selector selects.
	ListPods(ctx context.Context, namespace, selector string) (*corev1.PodList, error)
	// PatchNode applies a JSON merge patch to Node name.
	PatchNode(ctx context.Context, name string, patch []byte) error
	CreateEvent(ctx context.Context, ev *corev1.Event) error
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error
}

// Client is the API server's core/v1 API through client-go's REST client,
// with only core/v1's types registered: client-go's typed clientset
// registers every API group's, and made the binary 28 MB larger.
type Client struct {
	rc *rest.RESTClient
}

// Connect is a client of the API server the kubeconfig at path names, each
// request bounded by RequestTimeout. It sends nothing: a server that does
// not answer is found by the first request.
func Connect(path string) (*Client, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoKubeconfig, path)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg.Timeout = RequestTimeout
	cfg.UserAgent = "stratum-upgrade"
	cfg.APIPath = "/api"
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return &Client{rc: rc}, nil
}

// GetNode is Node name.
func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	err := c.rc.Get().Resource("nodes").Name(name).Do(ctx).Into(&n)
	return &n, err
}

// ListNodes is every Node.
func (c *Client) ListNodes(ctx context.Context) (*corev1.NodeList, error) {
	var l corev1.NodeList
	err := c.rc.Get().Resource("nodes").Do(ctx).Into(&l)
	return &l, err
}

// ListPods is the Pods in namespace that the label selector selects.
func (c *Client) ListPods(ctx context.Context, namespace, selector string) (*corev1.PodList, error) {
	var l corev1.PodList
	err := c.rc.Get().Namespace(namespace).Resource("pods").Param("labelSelector", selector).Do(ctx).Into(&l)
	return &l, err
}

// PatchNode applies the JSON merge patch to Node name.
func (c *Client) PatchNode(ctx context.Context, name string, patch []byte) error {
	return c.rc.Patch(types.MergePatchType).Resource("nodes").Name(name).Body(patch).Do(ctx).Error()
}

// CreateEvent creates ev in its namespace.
func (c *Client) CreateEvent(ctx context.Context, ev *corev1.Event) error {
	return c.rc.Post().Namespace(ev.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

// GetConfigMap is ConfigMap namespace/name.
func (c *Client) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	err := c.rc.Get().Namespace(namespace).Resource("configmaps").Name(name).Do(ctx).Into(&cm)
	return &cm, err
}

// UpdateConfigMap replaces cm (a conflict when its resourceVersion is not
// the server's).
func (c *Client) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return c.rc.Put().Namespace(cm.Namespace).Resource("configmaps").Name(cm.Name).Body(cm).Do(ctx).Error()
}

// transient says whether err may go away by itself: the server did not
// answer (down, restarting: a transaction replaces it), or answered that
// it is overloaded or failing. Any other answer is final, and so is a
// server whose certificate the kubeconfig's CA does not verify.
func transient(err error) bool {
	var cert *tls.CertificateVerificationError
	if errors.As(err, &cert) || errors.Is(err, ErrNoNode) {
		return false
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	code := int(st.Status().Code)
	return code == 0 || code == http.StatusTooManyRequests || code >= 500
}
