package etcdcluster

import (
	"fmt"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
)

// Use makes the member's next Start run the etcd build version (any name
// etcdbuild.Lookup takes), as a rolling upgrade replaces one member's
// binary: a cluster of members at different minors. The member must be
// stopped (Kill) first.
func (m *Member) Use(version string) error {
	if m.Running() {
		return fmt.Errorf("etcdcluster: use etcd %s on %s: still running (pid %d)", version, m.Name, m.Pid())
	}
	bin, err := etcdbuild.Binary(version)
	if err != nil {
		return fmt.Errorf("etcdcluster: use etcd %s on %s: %w", version, m.Name, err)
	}
	m.binary = bin
	return nil
}
