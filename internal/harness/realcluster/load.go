package realcluster

// The writers and probes of a scenario (issue 38): every 100 ms a numbered
// ConfigMap through each node's own kube-apiserver and a numbered key
// straight to etcd; every 100 ms each node's /readyz and a list, and each
// member's /health. Stop reads every acknowledged write back and returns
// the figures of the scenario's line.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// LoadInterval is how often each writer writes and each probe asks.
const LoadInterval = 100 * time.Millisecond

// loadTimeout bounds one write or probe: a live server answers in
// milliseconds; a stopped one refuses the connection at once.
const loadTimeout = 2 * time.Second

// loadLabel marks the ConfigMaps a Load writes, with its scenario's name.
const loadLabel = "stratum-load"

// Load is a scenario's running writers and probes.
type Load struct {
	scenario string
	c        *Cluster
	api      *http.Client // admin.conf's client certificate
	etcd     *clientv3.Client
	health   *http.Client // a new connection per probe
	stop     chan struct{}
	done     sync.WaitGroup

	mu        sync.Mutex
	ackedCMs  []string
	ackedKeys []string
	attempted int
	ticks     int
	anyOK     int
	nodeOK    map[string]int
	maxDown   int
	downAt    []string // the members down in the first sample with maxDown down
}

// Figures are a scenario's measures (Load.Stop).
type Figures struct {
	MaxDown          int      // etcd members not answering /health at once, at most
	DownAt           []string // the members down at that moment
	Acked, Attempted int      // writes acknowledged / tried
	Lost             []string // acknowledged and missing
	AnyNode          float64  // share of probe rounds some node answered both probes of
	WorstNode        float64  // the lowest node's share of rounds it answered
	WorstName        string
}

// Line is the scenario's figure line as issue 38 words it.
func (f Figures) Line(scenario string, took time.Duration) string {
	return fmt.Sprintf("real cluster %s: max members down at once %d, writes acked %d/%d, %d lost, API %.2f%% (any node) / %.2f%% (worst node, %s), took %d s",
		scenario, f.MaxDown, f.Acked, f.Attempted, len(f.Lost), 100*f.AnyNode, 100*f.WorstNode, f.WorstName, int(took.Seconds()))
}

// StartLoad starts the writers and probes of scenario.
func (c *Cluster) StartLoad(scenario string) (*Load, error) {
	api, _, err := c.adminClient(loadTimeout)
	if err != nil {
		return nil, err
	}
	etcdTLS, err := c.etcdTLS()
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, n := range c.Nodes {
		eps = append(eps, "https://"+n.Address+":2379")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: etcdTLS, DialTimeout: loadTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("real cluster: load: %w", err)
	}
	l := &Load{scenario: scenario, c: c, api: api, etcd: cli, stop: make(chan struct{}), nodeOK: map[string]int{},
		health: &http.Client{Timeout: loadTimeout, Transport: &http.Transport{TLSClientConfig: etcdTLS, DisableKeepAlives: true}}}
	for _, n := range c.Nodes {
		l.every(func(i int) { l.writeConfigMap(n, i) })
	}
	l.every(l.writeKey)
	l.every(func(int) { l.probe() })
	return l, nil
}

// every runs f(0), f(1), ... every LoadInterval, each in its own
// goroutine so that a slow answer does not delay the next, until Stop.
func (l *Load) every(f func(i int)) {
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		t := time.NewTicker(LoadInterval)
		defer t.Stop()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			inflight.Add(1)
			go func() { defer inflight.Done(); f(i) }()
		}
	}()
}

func (l *Load) writeConfigMap(n *Node, i int) {
	name := fmt.Sprintf("load-%s-%s-%06d", l.scenario, n.Name, i)
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "labels": map[string]string{loadLabel: l.scenario}},
		"data":     map[string]string{"i": fmt.Sprint(i)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+n.Address+":6443/api/v1/namespaces/default/configmaps", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.api.Do(req)
	ok := err == nil && resp.StatusCode == http.StatusCreated
	if err == nil {
		resp.Body.Close()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempted++
	if ok {
		l.ackedCMs = append(l.ackedCMs, name)
	}
}

func (l *Load) writeKey(i int) {
	k := fmt.Sprintf("/stratum-load/%s/%06d", l.scenario, i)
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	_, err := l.etcd.Put(ctx, k, k)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempted++
	if err == nil {
		l.ackedKeys = append(l.ackedKeys, k)
	}
}

// probe is one round: each node's /readyz and a list of ConfigMaps, and
// each member's /health, all at once.
func (l *Load) probe() {
	var wg sync.WaitGroup
	answered := make([]bool, len(l.c.Nodes))
	memberDown := make([]bool, len(l.c.Nodes))
	for i, n := range l.c.Nodes {
		wg.Add(2)
		go func() {
			defer wg.Done()
			answered[i] = l.get(l.api, "https://"+n.Address+":6443/readyz") == http.StatusOK &&
				l.get(l.api, "https://"+n.Address+":6443/api/v1/namespaces/default/configmaps?limit=1") == http.StatusOK
		}()
		go func() {
			defer wg.Done()
			memberDown[i] = l.get(l.health, "https://"+n.Address+":2379/health") == 0
		}()
	}
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ticks++
	anyOK, down := false, []string(nil)
	for i, n := range l.c.Nodes {
		if answered[i] {
			anyOK = true
			l.nodeOK[n.Name]++
		}
		if memberDown[i] {
			down = append(down, n.Name)
		}
	}
	if anyOK {
		l.anyOK++
	}
	if len(down) > l.maxDown {
		l.maxDown, l.downAt = len(down), down
	}
}

// get is the status of GET url, 0 when nothing answered.
func (l *Load) get(hc *http.Client, url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Stop stops the writers and probes, reads every acknowledged write back
// (the ConfigMaps through the load balancer, the keys from etcd) and
// returns the figures.
func (l *Load) Stop(ctx context.Context) (Figures, error) {
	close(l.stop)
	l.done.Wait()
	defer l.etcd.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	f := Figures{MaxDown: l.maxDown, DownAt: l.downAt, Acked: len(l.ackedCMs) + len(l.ackedKeys), Attempted: l.attempted, WorstNode: 1}
	if l.ticks > 0 {
		f.AnyNode = float64(l.anyOK) / float64(l.ticks)
		for _, n := range l.c.Nodes {
			if share := float64(l.nodeOK[n.Name]) / float64(l.ticks); share < f.WorstNode || f.WorstName == "" {
				f.WorstNode, f.WorstName = share, n.Name
			}
		}
	}
	have, err := l.configMaps(ctx)
	if err != nil {
		return f, err
	}
	for _, name := range l.ackedCMs {
		if !have[name] {
			f.Lost = append(f.Lost, "ConfigMap "+name)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := l.etcd.Get(rctx, "/stratum-load/"+l.scenario+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return f, fmt.Errorf("real cluster: read the etcd keys back: %w", err)
	}
	keys := map[string]bool{}
	for _, kv := range resp.Kvs {
		keys[string(kv.Key)] = true
	}
	for _, k := range l.ackedKeys {
		if !keys[k] {
			f.Lost = append(f.Lost, "key "+k)
		}
	}
	return f, nil
}

// configMaps is the set of the scenario's ConfigMaps the API server
// (through the load balancer) lists, page by page.
func (l *Load) configMaps(ctx context.Context) (map[string]bool, error) {
	have := map[string]bool{}
	cont := ""
	for {
		url := fmt.Sprintf("https://%s/api/v1/namespaces/default/configmaps?labelSelector=%s%%3D%s&limit=500&continue=%s", Endpoint, loadLabel, l.scenario, cont)
		var list struct {
			Metadata struct {
				Continue string `json:"continue"`
			} `json:"metadata"`
			Items []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"items"`
		}
		if err := l.getJSON(ctx, url, &list); err != nil {
			return nil, fmt.Errorf("real cluster: read the ConfigMaps back: %w", err)
		}
		for _, it := range list.Items {
			have[it.Metadata.Name] = true
		}
		if cont = list.Metadata.Continue; cont == "" {
			return have, nil
		}
	}
}

func (l *Load) getJSON(ctx context.Context, url string, v any) error {
	var last error
	for try := 0; try < 10; try++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		resp, err := l.api.Do(req)
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				err = json.NewDecoder(resp.Body).Decode(v)
			} else {
				err = fmt.Errorf("GET %s: %s", url, resp.Status)
			}
			resp.Body.Close()
		}
		cancel()
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(time.Second)
	}
	return last
}
