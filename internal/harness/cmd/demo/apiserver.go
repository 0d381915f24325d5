// The real demo's checks through the real kube-apiserver (-real).

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// configMapName is the ConfigMap, in namespace default, the real demo
// writes before the upgrade and reads back after it and the rollback.
const configMapName = "demo-written-by"

// apiTimeout bounds each request to the apiserver, retries included: a
// real kube-apiserver just started, or etcd's leader settling, refuses or
// answers 5xx for a few seconds.
const apiTimeout = time.Minute

// writeConfigMap creates the ConfigMap through the apiserver, holding the
// version it serves.
func (d *demo) writeConfigMap(ctx context.Context) error {
	v, err := d.apiVersion(ctx)
	if err != nil {
		return err
	}
	val := "kube-apiserver " + v
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"name": configMapName},
		"data":     map[string]string{"written-by": val},
	})
	if err != nil {
		return err
	}
	if _, err := d.api(ctx, http.MethodPost, "/api/v1/namespaces/default/configmaps", body, http.StatusCreated); err != nil {
		return err
	}
	d.say("kube-apiserver serves %s; through it the demo created ConfigMap default/%s, written-by = %q", v, configMapName, val)
	return nil
}

// readConfigMap is the step after what (the upgrade, the rollback): the
// apiserver serves the good release's version and the ConfigMap reads back
// as written before the upgrade.
func (d *demo) readConfigMap(what string) func(context.Context) error {
	return func(ctx context.Context) error {
		v, err := d.apiVersion(ctx)
		if err != nil {
			return err
		}
		if v != d.sc.good {
			return fmt.Errorf("after %s kube-apiserver serves %s, want %s", what, v, d.sc.good)
		}
		b, err := d.api(ctx, http.MethodGet, "/api/v1/namespaces/default/configmaps/"+configMapName, nil, http.StatusOK)
		if err != nil {
			return fmt.Errorf("after %s: %w", what, err)
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal(b, &cm); err != nil {
			return fmt.Errorf("after %s: ConfigMap %s: %w", what, configMapName, err)
		}
		want := "kube-apiserver " + d.sc.from
		if got := cm.Data["written-by"]; got != want {
			return fmt.Errorf("after %s ConfigMap default/%s reads written-by = %q, want %q", what, configMapName, got, want)
		}
		d.say("after %s kube-apiserver serves %s and read back ConfigMap default/%s: written-by = %q", what, v, configMapName, want)
		return nil
	}
}

// apiVersion is the gitVersion the apiserver reports on /version.
func (d *demo) apiVersion(ctx context.Context) (string, error) {
	b, err := d.api(ctx, http.MethodGet, "/version", nil, http.StatusOK)
	if err != nil {
		return "", err
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.GitVersion == "" {
		return "", fmt.Errorf("kube-apiserver /version: no gitVersion in %s (%v)", bytes.TrimSpace(b), err)
	}
	return v.GitVersion, nil
}

// api sends one request (a JSON body unless nil) to the apiserver as the
// admin user and returns the answer's body, an error unless its status is
// want. It retries while the server refuses or answers 5xx, up to
// apiTimeout.
func (d *demo) api(ctx context.Context, method, path string, body []byte, want int) ([]byte, error) {
	hc, err := d.node.AdminClient()
	if err != nil {
		return nil, err
	}
	hc.Timeout = 10 * time.Second
	defer hc.CloseIdleConnections()
	url := d.node.APIServerURL() + path
	deadline := time.Now().Add(apiTimeout)
	for {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		var last error
		resp, err := hc.Do(req)
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
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("kube-apiserver %s %s: %w (tried for %s)", method, path, last, apiTimeout)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
