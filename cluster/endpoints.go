package cluster

// The members' client URLs a node last saw, kept beside its journal: a
// node whose own etcd is down (stopped for its replacement when the node
// crashed) reaches the others through them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/ciq/stratum-upgrade/durable"
)

// EndpointsFile is the file's name in the state directory.
const EndpointsFile = "cluster-endpoints.json"

// LoadEndpoints reads the endpoints SaveEndpoints kept at path: none when
// the file is missing; an error when it is not what SaveEndpoints writes.
func LoadEndpoints(path string) ([]string, error) {
	b, _, err := durable.ReadRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("known etcd endpoints: %w", err)
	}
	var eps []string
	if err := json.Unmarshal(b, &eps); err != nil {
		return nil, fmt.Errorf("known etcd endpoints %s: not a JSON list of URLs (%v); remove it, the next command against a healthy local etcd writes it again", path, err)
	}
	for _, u := range eps {
		if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
			return nil, fmt.Errorf("known etcd endpoints %s: %q is not an http(s) URL; remove the file", path, u)
		}
	}
	return eps, nil
}

// SaveEndpoints writes eps to path with durable.WriteFile: atomic and
// durable, the old list or the new one, never a mix, also after a crash; a
// symlink at path is refused.
func SaveEndpoints(path string, eps []string) error {
	b, err := json.Marshal(eps)
	if err != nil {
		return fmt.Errorf("known etcd endpoints: %w", err)
	}
	if _, err := durable.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("known etcd endpoints: %w", err)
	}
	return nil
}
