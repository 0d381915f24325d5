package cluster

// The members' client URLs a node last saw, kept beside its journal: a
// node whose own etcd is down (stopped for its replacement when the node
// crashed) reaches the others through them.

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/google/renameio/v2"
)

// EndpointsFile is the file's name in the state directory.
const EndpointsFile = "cluster-endpoints.json"

// LoadEndpoints reads the endpoints SaveEndpoints kept at path: none when
// the file is missing; an error when it is not what SaveEndpoints writes.
func LoadEndpoints(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
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

// SaveEndpoints writes eps to path, atomically and durably (renameio): the
// file is the old list or the new one, never a mix, also after a crash.
func SaveEndpoints(path string, eps []string) error {
	b, err := json.Marshal(eps)
	if err != nil {
		return fmt.Errorf("known etcd endpoints: %w", err)
	}
	if err := renameio.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("known etcd endpoints: %w", err)
	}
	return nil
}
