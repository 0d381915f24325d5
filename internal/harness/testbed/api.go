package testbed

// API: the node's real kube-apiserver as kubernetes-admin, for the tests of
// the real control plane (engine, testbed, e2e) and the real demo.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// API sends requests to a node's kube-apiserver as kubernetes-admin
// (system:masters), trusting the cluster CA. Each request retries while
// the server refuses connections or answers 5xx (one that just started, or
// etcd's leader settling) until its retry window ends; any other answer is
// final. It returns errors, never t.Fatal, so a program can use it too.
type API struct {
	c     *http.Client
	url   string
	retry time.Duration
}

// APIRetry is how long an API request retries a refused connection or a
// 5xx answer.
const APIRetry = time.Minute

// AdminAPI is st's kube-apiserver as kubernetes-admin, from the admin
// certificate in st's PKI directory (Options.Real writes it).
func AdminAPI(st *nodestate.NodeState) (*API, error) {
	n := &Node{State: st}
	c, err := n.AdminClient()
	if err != nil {
		return nil, err
	}
	c.Timeout = 10 * time.Second
	return &API{c: c, url: n.APIServerURL(), retry: APIRetry}, nil
}

// API is the node's kube-apiserver as kubernetes-admin (see AdminAPI).
func (n *Node) API() (*API, error) { return AdminAPI(n.State) }

// Close drops the idle connections.
func (a *API) Close() { a.c.CloseIdleConnections() }

// Do sends one request (a JSON body unless nil) to path and returns the
// body of the answer, an error unless its status is want.
func (a *API) Do(ctx context.Context, method, path string, body []byte, want int) ([]byte, error) {
	deadline := time.Now().Add(a.retry)
	for {
		req, err := http.NewRequestWithContext(ctx, method, a.url+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		var last error
		resp, err := a.c.Do(req)
		if err == nil {
			b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			switch {
			case rerr != nil:
				last = rerr
			case resp.StatusCode == want:
				return b, nil
			case resp.StatusCode < 500:
				return nil, fmt.Errorf("kube-apiserver %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
			default:
				last = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
			}
		} else {
			last = err
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("kube-apiserver %s %s: no answer within %s: %w", method, path, a.retry, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// GetJSON GETs path into v; a status other than 200 is an error.
func (a *API) GetJSON(ctx context.Context, path string, v any) error {
	b, err := a.Do(ctx, http.MethodGet, path, nil, http.StatusOK)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("kube-apiserver GET %s: %w", path, err)
	}
	return nil
}

// Version is the gitVersion the server reports on /version.
func (a *API) Version(ctx context.Context) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := a.GetJSON(ctx, "/version", &v); err != nil {
		return "", err
	}
	if v.GitVersion == "" {
		return "", fmt.Errorf("kube-apiserver /version: no gitVersion")
	}
	return v.GitVersion, nil
}

// CreateConfigMap creates ConfigMap namespace/name holding data.
func (a *API) CreateConfigMap(ctx context.Context, namespace, name string, data map[string]string) error {
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"name": name},
		"data":     data,
	})
	if err != nil {
		return err
	}
	_, err = a.Do(ctx, http.MethodPost, "/api/v1/namespaces/"+namespace+"/configmaps", body, http.StatusCreated)
	return err
}

// ConfigMap is the data of ConfigMap namespace/name.
func (a *API) ConfigMap(ctx context.Context, namespace, name string) (map[string]string, error) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := a.GetJSON(ctx, "/api/v1/namespaces/"+namespace+"/configmaps/"+name, &cm); err != nil {
		return nil, err
	}
	return cm.Data, nil
}

// LeaseHolder is the holder of Lease kube-system/name ("" when none).
func (a *API) LeaseHolder(ctx context.Context, name string) (string, error) {
	var l struct {
		Spec struct {
			HolderIdentity string `json:"holderIdentity"`
		} `json:"spec"`
	}
	if err := a.GetJSON(ctx, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/"+name, &l); err != nil {
		return "", err
	}
	return l.Spec.HolderIdentity, nil
}
