package cluster

// etcd minor versions across the members: the cluster version moves to a
// new minor only when every member runs it, and then an older etcd cannot
// start on the data (since 3.6 the storage version moves with it).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/version"
)

// Observe is what CheckQuorum sees, without judging it: the member list
// and every member's status, each asked at its own client URL.
func Observe(ctx context.Context, cli *clientv3.Client, self string) (*Health, error) {
	return observe(ctx, cli, self)
}

// OthersOnMinor reports whether every member but self runs etcd minor
// ("3.7"), by the versions h saw; a member that did not answer counts as
// not on it. When they all do, self moving to minor moves the cluster
// version: an etcd of an older minor can no longer start on self's data.
// It is what the gate announces; a rollback decides from Versions.
func (h *Health) OthersOnMinor(minor string) (bool, []string) {
	var behind []string
	for _, m := range h.Members {
		if m.ID == h.Self {
			continue
		}
		if !m.Healthy || !strings.HasPrefix(m.Version, minor+".") {
			behind = append(behind, fmt.Sprintf("%s (%s)", m.Name, orUnknown(m.Version)))
		}
	}
	return len(behind) == 0, behind
}

// Versions is what a rollback decides etcd's way back from: every
// member's status (Health: its etcd version is MemberHealth.Version, ""
// when it did not answer) and the cluster version etcd reports.
type Versions struct {
	*Health
	// Cluster is the cluster version the members report at their
	// /version endpoint ("3.6.0"), the highest of their answers; ""
	// when none answered, and ClusterErr says why.
	Cluster    string
	ClusterErr string
}

// ReadVersions reads the member list and every member's status through
// cli (as Observe), and every member's /version at its own client URLs
// over https with tlsCfg, each within StatusTimeout. It returns an error
// only when the member list cannot be read.
func ReadVersions(ctx context.Context, cli *clientv3.Client, tlsCfg *tls.Config, self string) (*Versions, error) {
	h, err := observe(ctx, cli, self)
	if err != nil {
		return nil, err
	}
	v := &Versions{Health: h}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: StatusTimeout}
	defer hc.CloseIdleConnections()
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	for _, m := range h.Members {
		wg.Go(func() {
			cv, err := clusterVersionAt(ctx, hc, m.ClientURLs)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("%s: %v", orUnknown(m.Name), err))
			case v.Cluster == "" || newer(cv, v.Cluster):
				v.Cluster = cv
			}
		})
	}
	wg.Wait()
	if v.Cluster == "" {
		v.ClusterErr = "no member answered its /version: " + strings.Join(errs, "; ")
		if len(h.Members) == 0 {
			v.ClusterErr = "the member list is empty"
		}
	}
	return v, nil
}

// clusterVersionAt is the "etcdcluster" of the first of urls that answers
// its /version (etcd's version endpoint: {"etcdserver", "etcdcluster"}).
func clusterVersionAt(ctx context.Context, hc *http.Client, urls []string) (string, error) {
	err := fmt.Errorf("no client URL")
	for _, u := range urls {
		var cv string
		if cv, err = getClusterVersion(ctx, hc, strings.TrimSuffix(u, "/")+"/version"); err == nil {
			return cv, nil
		}
	}
	return "", err
}

func getClusterVersion(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	var body struct {
		Cluster string `json:"etcdcluster"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	// etcd answers "not_decided" until its cluster version is set.
	if _, err := version.ParseGeneric(body.Cluster); err != nil {
		return "", fmt.Errorf("%s: cluster version %q not decided", url, body.Cluster)
	}
	return body.Cluster, nil
}

// newer reports whether version a is newer than b (both parse: callers
// keep only versions that do).
func newer(a, b string) bool {
	va, errA := version.ParseGeneric(a)
	vb, errB := version.ParseGeneric(b)
	return errA == nil && errB == nil && vb.LessThan(va)
}
