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
	"slices"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/version"
)

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

// ReadMembers is every member's health and etcd version, each from its own
// status at its own client URLs (as CheckQuorum reads them, without its
// verdict): what a skew check decides from, live. It returns an error only
// when the member list cannot be read.
func ReadMembers(ctx context.Context, cli *clientv3.Client, self string) (*Health, error) {
	return observe(ctx, cli, self)
}

// Below names the members but self whose etcd runs a minor older than
// minor ("3.6"), as "name (version)", and apart those whose version could
// not be read (it did not answer its status, or has not started): an
// unread version is never taken for any minor. Both are sorted by name.
func (h *Health) Below(minor string) (below, unknown []string) {
	for _, m := range h.Members {
		switch {
		case m.ID == h.Self:
		case m.Version == "":
			unknown = append(unknown, fmt.Sprintf("%s (%s)", orUnknown(m.Name), orUnknown(m.Err)))
		case !MinorAtLeast(m.Version, minor):
			below = append(below, fmt.Sprintf("%s (%s)", m.Name, m.Version))
		}
	}
	slices.Sort(below)
	slices.Sort(unknown)
	return below, unknown
}

// Versions is what a rollback decides etcd's way back from: every
// member's etcd version and the cluster version, each as the member
// answered at its own /version endpoint, beside the members' health
// (Health, as CheckQuorum reads it) that a message names.
type Versions struct {
	Health  *Health
	Members []MemberVersion
}

// MemberVersion is one member's answer at /version: its etcd version
// ("3.7.3") and the cluster version it reports ("3.7.0"); both "" when
// it did not answer, and Err says why.
type MemberVersion struct {
	ID      uint64
	Name    string
	Server  string
	Cluster string
	Err     string
}

// Cluster is the cluster version the members report, the newest of
// their answers ("" when none answered): a member that applied the move
// knows it first.
func (v *Versions) Cluster() string {
	c := ""
	for _, m := range v.Members {
		if m.Cluster != "" && (c == "" || newer(m.Cluster, c)) {
			c = m.Cluster
		}
	}
	return c
}

// ReadVersions reads the members as CheckQuorum does (their list, status
// and alarms), then every member's /version at its own client URLs over
// https with tlsCfg, all members at once, each within StatusTimeout. It
// returns an error only when the member list cannot be read.
func ReadVersions(ctx context.Context, cli *clientv3.Client, tlsCfg *tls.Config, self string) (*Versions, error) {
	h, err := observe(ctx, cli, self)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: StatusTimeout}
	defer hc.CloseIdleConnections()
	v := &Versions{Health: h, Members: make([]MemberVersion, len(h.Members))}
	var wg sync.WaitGroup
	for i, m := range h.Members {
		wg.Go(func() {
			mv := MemberVersion{ID: m.ID, Name: m.Name}
			server, cluster, err := versionAt(ctx, hc, m.ClientURLs)
			if err != nil {
				mv.Err = err.Error()
			}
			mv.Server, mv.Cluster = server, cluster
			v.Members[i] = mv
		})
	}
	wg.Wait()
	return v, nil
}

// versionAt is the answer of the first of urls that answers its /version
// (etcd's version endpoint: {"etcdserver", "etcdcluster"}). A cluster
// version etcd has not decided yet ("not_decided") is "".
func versionAt(ctx context.Context, hc *http.Client, urls []string) (server, cluster string, err error) {
	err = fmt.Errorf("no client URL (the member has not started)")
	for _, u := range urls {
		if server, cluster, err = getVersion(ctx, hc, strings.TrimSuffix(u, "/")+"/version"); err == nil {
			return server, cluster, nil
		}
	}
	return "", "", err
}

func getVersion(ctx context.Context, hc *http.Client, url string) (server, cluster string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	var body struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return "", "", fmt.Errorf("%s: %w", url, err)
	}
	if _, err := version.ParseGeneric(body.Server); err != nil {
		return "", "", fmt.Errorf("%s: etcd version %q: %w", url, body.Server, err)
	}
	if _, err := version.ParseGeneric(body.Cluster); err != nil {
		body.Cluster = ""
	}
	return body.Server, body.Cluster, nil
}

// newer reports whether version a is newer than b; a version that does
// not parse is never newer.
func newer(a, b string) bool {
	va, errA := version.ParseGeneric(a)
	vb, errB := version.ParseGeneric(b)
	return errA == nil && (errB != nil || vb.LessThan(va))
}

// MinorAtLeast reports whether version v ("3.7.0") is of minor ("3.7")
// or newer; false when either does not parse.
func MinorAtLeast(v, minor string) bool {
	vv, errV := version.ParseGeneric(v)
	vm, errM := version.ParseGeneric(minor + ".0")
	return errV == nil && errM == nil && (vv.Major() > vm.Major() || vv.Major() == vm.Major() && vv.Minor() >= vm.Minor())
}
