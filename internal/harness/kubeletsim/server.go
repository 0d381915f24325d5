package kubeletsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func (k *Kubelet) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /pods", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(k.Pods())
	})
	mux.HandleFunc("GET /events", k.serveEvents)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// Client reads a stand-in's status endpoint.
type Client struct {
	// Addr is the endpoint's host:port.
	Addr string
	HTTP *http.Client
}

// NewClient waits up to timeout for the stand-in rooted at rootDir to write
// its StatusAddrFile and returns a client for that address.
func NewClient(rootDir string, timeout time.Duration) (*Client, error) {
	path := filepath.Join(rootDir, StatusAddrFile)
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.TrimSpace(string(b)) != "" {
			return &Client{Addr: strings.TrimSpace(string(b)), HTTP: &http.Client{Timeout: 5 * time.Second}}, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("kubelet stand-in status address: %s not written within %s (is the stand-in running?): %v", path, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pods fetches GET /pods.
func (c *Client) Pods(ctx context.Context) ([]PodStatus, error) {
	var out []PodStatus
	if err := c.get(ctx, "/pods", "status", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// get fetches path from the status endpoint and decodes its JSON into out;
// what names the request in errors.
func (c *Client) get(ctx context.Context, path, what string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Addr+path, nil)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("kubelet stand-in %s %s: %w", what, c.Addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kubelet stand-in %s %s: %s", what, c.Addr, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("kubelet stand-in %s %s: decode: %w", what, c.Addr, err)
	}
	return nil
}

// WaitFor polls Pods until cond holds or timeout passes; the error names
// what was awaited and the last statuses seen.
func (c *Client) WaitFor(ctx context.Context, what string, timeout time.Duration, cond func([]PodStatus) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last []PodStatus
	var lastErr error
	for {
		st, err := c.Pods(ctx)
		if err == nil {
			last = st
			if cond(st) {
				return nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet stand-in: timed out after %s waiting for %s; pods: %s (last error: %v)", timeout, what, summary(last), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Events fetches GET /events: the stand-in's decisions, oldest first.
func (c *Client) Events(ctx context.Context) ([]Event, error) {
	var out []Event
	if err := c.get(ctx, "/events", "events", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Find returns the statuses in st with key, in creation order.
func Find(st []PodStatus, key string) []PodStatus {
	var out []PodStatus
	for _, p := range st {
		if p.Key == key {
			out = append(out, p)
		}
	}
	return out
}
