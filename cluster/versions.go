package cluster

// etcd minor versions across the members: the cluster version moves to a
// new minor only when every member runs it, and then an older etcd cannot
// start on the data (since 3.6 the storage version moves with it).

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
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
