package cluster

// How many members a node's etcd cluster has: read from the live member
// list at Connect, and kept beside the journal for a command run while etcd
// cannot be reached. The node state's --initial-cluster is a bootstrap
// input (kubeadm never rewrites the first node's) and says nothing here.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/ciq/stratum-upgrade/durable"
)

// MembersFile is the name, in the state directory beside EndpointsFile,
// of the member list a node last read.
const MembersFile = "cluster-members.json"

// Members is what a node read of its cluster's member list.
type Members struct {
	// Count is how many members the list had.
	Count int `json:"count"`
	// At is when the list was read.
	At time.Time `json:"at"`
	// StatedBy, when set, says the count was not read from etcd but
	// stated, and by whom ("the operator, with --etcd-members"); At is
	// then when it was stated.
	StatedBy string `json:"statedBy,omitempty"`
}

// LoadMembers reads the list SaveMembers kept at path: nil when the file is
// missing; an error when it is not what SaveMembers writes.
func LoadMembers(path string) (*Members, error) {
	b, _, err := durable.ReadRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("known etcd member count: %w", err)
	}
	var m Members
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("known etcd member count %s: not what stratum-upgrade writes (%v); remove it, the next command against a healthy etcd writes it again", path, err)
	}
	if m.Count < 1 {
		return nil, fmt.Errorf("known etcd member count %s: %d members is not a member list; remove it, the next command against a healthy etcd writes it again", path, m.Count)
	}
	return &m, nil
}

// SaveMembers writes m to path atomically and durably (durable.WriteFile):
// the old list or the new one, also after a crash.
func SaveMembers(path string, m Members) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("known etcd member count: %w", err)
	}
	if _, err := durable.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("known etcd member count: %w", err)
	}
	return nil
}

// anyAccepts reports whether any of eps accepts a TCP connection within d:
// a node whose etcd is stopped (nothing listens on its client port, and no
// other member is known) is told so at once rather than after the client's
// whole dial timeout.
func anyAccepts(eps []string, d time.Duration) bool {
	var wg sync.WaitGroup
	ok := make(chan struct{}, len(eps))
	for _, ep := range eps {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			continue
		}
		wg.Go(func() {
			if c, err := net.DialTimeout("tcp", u.Host, d); err == nil {
				c.Close()
				ok <- struct{}{}
			}
		})
	}
	wg.Wait()
	return len(ok) > 0
}
