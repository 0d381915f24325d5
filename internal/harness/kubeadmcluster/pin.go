package kubeadmcluster

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// PinMoved writes into kubeadm configuration cfg (its documents, "---"
// apart) where a node moved onto the test bed keeps what kubeadm leaves to
// its defaults when unset: the PKI directory (certificatesDir), etcd's
// data directory (etcd.local.dataDir) and the API server's port
// (localAPIEndpoint.bindPort). init --from-kubeadm cross-checks the
// configuration against the manifests with kubeadm's defaults filled in,
// and a moved node no longer runs on them. The directories are set only
// where the configuration leaves them unset (a set one was moved with the
// text); the port always (a move rewrites ports in URLs and flags, not a
// bare bindPort). Comments are not kept.
func PinMoved(cfg, certDir, dataDir string, bindPort int) (string, error) {
	var docs []string
	for _, doc := range strings.Split(cfg, "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return "", fmt.Errorf("kubeadm configuration: %w", err)
		}
		if m == nil {
			continue
		}
		switch m["kind"] {
		case "InitConfiguration", "JoinConfiguration":
			child(m, "localAPIEndpoint")["bindPort"] = bindPort
		case "ClusterConfiguration":
			setUnset(m, "certificatesDir", certDir)
			setUnset(child(child(m, "etcd"), "local"), "dataDir", dataDir)
		}
		b, err := yaml.Marshal(m)
		if err != nil {
			return "", fmt.Errorf("kubeadm configuration: %w", err)
		}
		docs = append(docs, string(b))
	}
	return strings.Join(docs, "---\n"), nil
}

// child is parent[key] as a map, made when absent.
func child(parent map[string]any, key string) map[string]any {
	if c, ok := parent[key].(map[string]any); ok {
		return c
	}
	c := map[string]any{}
	parent[key] = c
	return c
}

func setUnset(m map[string]any, key string, v any) {
	if _, ok := m[key]; !ok {
		m[key] = v
	}
}
