// Package kubeapi is stratum-upgrade's one client of the cluster's API
// server: it posts a transaction's Events on the node's Node object, keeps
// the last outcome in the Node's annotations, and keeps kubeadm's
// ClusterConfiguration (the kube-system/kubeadm-config ConfigMap) at the
// versions the node runs. The node is upgraded through its manifest
// directory, never through the API: nothing here waits long on the API
// server or decides a transaction, and a failure is the caller's warning.
package kubeapi

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// RequestTimeout bounds every request to the API server.
const RequestTimeout = 5 * time.Second

// ErrNoKubeconfig: the kubeconfig file does not exist, so there is no API
// server to tell.
var ErrNoKubeconfig = errors.New("no kubeconfig")

// Connect is a client of the API server the kubeconfig at path names, each
// request bounded by RequestTimeout. It sends nothing: a server that does
// not answer is found by the first request.
func Connect(path string) (kubernetes.Interface, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoKubeconfig, path)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg.Timeout = RequestTimeout
	cfg.UserAgent = "stratum-upgrade"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cs, nil
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
