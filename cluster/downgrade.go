package cluster

// etcd's own downgrade protocol as the members report it: what status
// --cluster shows while a downgrade is under way, and what lets a
// rollback --last through a halted rollout.

import (
	"context"
	"fmt"
	"strings"
)

// EtcdDowngrade is an etcd downgrade under way: enabled (etcdctl downgrade
// enable, or a stratum-upgrade rollback past the cluster version), and not
// yet finished. etcd ends it by itself once every member runs the target
// minor; until then the members still on the newer minor each go back in
// their own node's transaction (rollback --last).
type EtcdDowngrade struct {
	// Target is the version etcd downgrades to ("3.6.0").
	Target string `json:"target"`
	// Members is every member's etcd and storage version.
	Members []DowngradeMember `json:"members"`
}

// DowngradeMember is one member's part in a downgrade.
type DowngradeMember struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// StorageVersion is the data's format: the target's once etcd
	// downgraded it, and only then may the member's binary go back.
	StorageVersion string `json:"storageVersion"`
	Err            string `json:"error"`
}

// Behind is the members that do not run the target minor yet (or did not
// answer), as "name (version)".
func (d *EtcdDowngrade) Behind() []string {
	var out []string
	for _, m := range d.Members {
		switch {
		case m.Version == "":
			out = append(out, m.Name+" (did not answer)")
		case minorOf(m.Version) != minorOf(d.Target):
			out = append(out, fmt.Sprintf("%s (%s)", m.Name, m.Version))
		}
	}
	return out
}

// minorOf is "3.6" of "3.6.16" ("" when it has no minor).
func minorOf(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "." + parts[1]
}

// EtcdDowngrade reads every member's status and returns the downgrade
// they report enabled, nil when none does. A member that does not answer
// is listed with its error. Only the member list failing is an error.
func (c *Coordinator) EtcdDowngrade(ctx context.Context) (*EtcdDowngrade, error) {
	h, err := observe(ctx, c.cli, c.cfg.Node)
	if err != nil {
		return nil, err
	}
	return h.EtcdDowngrade(), nil
}

// EtcdDowngrade is the downgrade h's members report, nil when none
// reports one enabled.
func (h *Health) EtcdDowngrade() *EtcdDowngrade {
	var d *EtcdDowngrade
	for _, m := range h.Members {
		if m.Downgrading != "" {
			d = &EtcdDowngrade{Target: m.Downgrading}
			break
		}
	}
	if d == nil {
		return nil
	}
	for _, m := range h.Members {
		d.Members = append(d.Members, DowngradeMember{Name: m.Name, Version: m.Version, StorageVersion: m.StorageVersion, Err: m.Err})
	}
	return d
}
