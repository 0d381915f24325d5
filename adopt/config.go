package adopt

import (
	"bytes"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/durable"
)

// KubeadmConfig is what adoption reads of kubeadm's configuration file
// (kubeadm.k8s.io/v1beta3 or v1beta4: InitConfiguration,
// ClusterConfiguration, JoinConfiguration, in one multi-document file).
// The manifests say what runs; the file only names the node when the
// manifests cannot, refuses an external etcd, and is cross-checked.
type KubeadmConfig struct {
	File string
	// NodeName is nodeRegistration.name.
	NodeName string
	// AdvertiseAddress is localAPIEndpoint.advertiseAddress
	// (InitConfiguration) or controlPlane.localAPIEndpoint's (Join).
	AdvertiseAddress string
	// KubernetesVersion is ClusterConfiguration's kubernetesVersion.
	KubernetesVersion string
	// CertificatesDir, EtcdDataDir, ServiceSubnet and PodSubnet are
	// ClusterConfiguration's.
	CertificatesDir, EtcdDataDir, ServiceSubnet, PodSubnet string
	// ExternalEtcd is set when ClusterConfiguration has etcd.external.
	ExternalEtcd bool
}

// kubeadmDoc is the union of the fields read from each document.
type kubeadmDoc struct {
	APIVersion       string `json:"apiVersion"`
	Kind             string `json:"kind"`
	NodeRegistration struct {
		Name string `json:"name"`
	} `json:"nodeRegistration"`
	LocalAPIEndpoint struct {
		AdvertiseAddress string `json:"advertiseAddress"`
	} `json:"localAPIEndpoint"`
	ControlPlane *struct {
		LocalAPIEndpoint struct {
			AdvertiseAddress string `json:"advertiseAddress"`
		} `json:"localAPIEndpoint"`
	} `json:"controlPlane"`
	KubernetesVersion string `json:"kubernetesVersion"`
	CertificatesDir   string `json:"certificatesDir"`
	Networking        struct {
		ServiceSubnet string `json:"serviceSubnet"`
		PodSubnet     string `json:"podSubnet"`
	} `json:"networking"`
	Etcd struct {
		Local *struct {
			DataDir string `json:"dataDir"`
		} `json:"local"`
		External *struct{} `json:"external"`
	} `json:"etcd"`
}

// ReadKubeadmConfig reads kubeadm's configuration file at path. A document
// that is not kubeadm's (another apiVersion, such as a KubeletConfiguration
// beside them) is skipped; a file with no kubeadm document, or one that
// does not parse, is an error naming the file.
func ReadKubeadmConfig(path string) (*KubeadmConfig, error) {
	b, _, err := durable.ReadRegular(path)
	if err != nil {
		return nil, fmt.Errorf("kubeadm configuration: %w", err)
	}
	cfg := &KubeadmConfig{File: path}
	found := false
	for i, doc := range splitYAML(b) {
		var d kubeadmDoc
		if err := yaml.Unmarshal(doc, &d); err != nil {
			return nil, fmt.Errorf("kubeadm configuration %s, document %d: %w", path, i+1, err)
		}
		if !strings.HasPrefix(d.APIVersion, "kubeadm.k8s.io/") {
			continue
		}
		found = true
		switch d.Kind {
		case "InitConfiguration":
			cfg.NodeName = or(cfg.NodeName, d.NodeRegistration.Name)
			cfg.AdvertiseAddress = or(cfg.AdvertiseAddress, d.LocalAPIEndpoint.AdvertiseAddress)
		case "JoinConfiguration":
			cfg.NodeName = or(cfg.NodeName, d.NodeRegistration.Name)
			if d.ControlPlane != nil {
				cfg.AdvertiseAddress = or(cfg.AdvertiseAddress, d.ControlPlane.LocalAPIEndpoint.AdvertiseAddress)
			}
		case "ClusterConfiguration":
			cfg.KubernetesVersion = d.KubernetesVersion
			cfg.CertificatesDir = d.CertificatesDir
			cfg.ServiceSubnet = d.Networking.ServiceSubnet
			cfg.PodSubnet = d.Networking.PodSubnet
			cfg.ExternalEtcd = d.Etcd.External != nil
			if d.Etcd.Local != nil {
				cfg.EtcdDataDir = d.Etcd.Local.DataDir
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeadm configuration %s: no kubeadm.k8s.io document (InitConfiguration, ClusterConfiguration or JoinConfiguration)", path)
	}
	return cfg, nil
}

// splitYAML splits a multi-document YAML stream at its "---" lines,
// dropping empty documents.
func splitYAML(b []byte) [][]byte {
	var out [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(cur.Bytes())) > 0 {
			out = append(out, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return out
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
