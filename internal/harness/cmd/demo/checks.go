// The demo's own checks against the node, and etcd through its JSON gateway.

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// checkEtcdUpgraded asks etcd which version it serves and reads back the
// key written under the etcd before.
func (d *demo) checkEtcdUpgraded(ctx context.Context) error {
	v, err := d.etcdVersion(ctx)
	if err != nil {
		return err
	}
	want := d.sc.etcdTo.Minor + "."
	if !strings.HasPrefix(v, want) {
		return fmt.Errorf("etcd serves %s after the upgrade, want %s*", v, want)
	}
	got, err := d.etcdGet(ctx, "demo/written-by")
	if err != nil {
		return err
	}
	if !strings.HasPrefix(got, "etcd "+d.sc.etcdFrom.Minor+".") {
		return fmt.Errorf("etcd %s: the key written before the upgrade reads %q", v, got)
	}
	fmt.Fprintln(d.w)
	d.say("etcd now serves %s, on the same data: demo/written-by still reads %q", v, got)
	return nil
}

// checkRolledBack checks the scheduler's manifest names the good release's
// image again and every component answers.
func (d *demo) checkRolledBack(ctx context.Context) error {
	p := filepath.Join(d.node.ManifestDir, manifest.FileName(nodestate.Scheduler))
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("after the rollback: %w", err)
	}
	want := "image: " + testbed.ModeImage(nodestate.Scheduler, d.sc.good, "") + "\n"
	if !strings.Contains(string(b), want) {
		return fmt.Errorf("after the rollback %s does not hold %q", p, strings.TrimSpace(want))
	}
	if err := d.node.WaitActive(ctx, checkTimeout); err != nil {
		return fmt.Errorf("after the rollback: %w", err)
	}
	v, err := d.etcdVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(d.w)
	d.say("kube-scheduler's manifest names %s again, every component answers, etcd serves %s", strings.TrimPrefix(strings.TrimSpace(want), "image: "), v)
	return nil
}

// etcd POSTs body (or GETs, when nil) to path on the node's etcd through
// its JSON gateway, with the apiserver's client certificate, and decodes
// the answer into out; it retries until checkTimeout. (Not etcd's client:
// see exitOK.)
func (d *demo) etcd(ctx context.Context, path string, body, out any) error {
	tlsCfg, err := d.node.EtcdTLS()
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	url := d.node.EtcdEndpoint() + path
	deadline := time.Now().Add(checkTimeout)
	for {
		err := func() error {
			method, rd := http.MethodGet, io.Reader(nil)
			if body != nil {
				b, err := json.Marshal(body)
				if err != nil {
					return err
				}
				method, rd = http.MethodPost, bytes.NewReader(b)
			}
			req, err := http.NewRequestWithContext(ctx, method, url, rd)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
			}
			return json.Unmarshal(b, out)
		}()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd %s: %w (tried for %s)", url, err, checkTimeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// etcdVersion is the server version etcd reports on /version.
func (d *demo) etcdVersion(ctx context.Context) (string, error) {
	var v struct {
		Server string `json:"etcdserver"`
	}
	if err := d.etcd(ctx, "/version", nil, &v); err != nil {
		return "", err
	}
	if v.Server == "" {
		return "", fmt.Errorf("etcd %s/version: no etcdserver version", d.node.EtcdEndpoint())
	}
	return v.Server, nil
}

// etcdPut writes k = v through the v3 gateway (keys and values base64).
func (d *demo) etcdPut(ctx context.Context, k, v string) error {
	var resp struct{}
	return d.etcd(ctx, "/v3/kv/put", map[string]string{"key": b64(k), "value": b64(v)}, &resp)
}

// etcdGet reads k through the v3 gateway: "" when it is not there.
func (d *demo) etcdGet(ctx context.Context, k string) (string, error) {
	var resp struct {
		KVs []struct {
			Value []byte `json:"value"` // base64 in JSON
		} `json:"kvs"`
	}
	if err := d.etcd(ctx, "/v3/kv/range", map[string]string{"key": b64(k)}, &resp); err != nil {
		return "", err
	}
	if len(resp.KVs) == 0 {
		return "", nil
	}
	return string(resp.KVs[0].Value), nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
