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
	// CertificatesDir, EtcdDataDir, ServiceSubnet, PodSubnet and
	// DNSDomain are ClusterConfiguration's.
	CertificatesDir, EtcdDataDir, ServiceSubnet, PodSubnet, DNSDomain string
	// BindPort is the API server's localAPIEndpoint.bindPort.
	BindPort int
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
	LocalAPIEndpoint apiEndpoint `json:"localAPIEndpoint"`
	ControlPlane     *struct {
		LocalAPIEndpoint apiEndpoint `json:"localAPIEndpoint"`
	} `json:"controlPlane"`
	KubernetesVersion string `json:"kubernetesVersion"`
	CertificatesDir   string `json:"certificatesDir"`
	Networking        struct {
		ServiceSubnet string `json:"serviceSubnet"`
		PodSubnet     string `json:"podSubnet"`
		DNSDomain     string `json:"dnsDomain"`
	} `json:"networking"`
	Etcd struct {
		Local *struct {
			DataDir string `json:"dataDir"`
		} `json:"local"`
		External *struct{} `json:"external"`
	} `json:"etcd"`
}

type apiEndpoint struct {
	AdvertiseAddress string `json:"advertiseAddress"`
	BindPort         int    `json:"bindPort"`
}

// kubeadm's defaults for what the configuration may omit (kubeadm's
// cmd/kubeadm/app/apis/kubeadm/v1beta4 defaults): a field left out is
// compared as kubeadm filled it in, not skipped.
const (
	kubeadmCertificatesDir = "/etc/kubernetes/pki"
	kubeadmEtcdDataDir     = "/var/lib/etcd"
	kubeadmServiceSubnet   = "10.96.0.0/12"
	kubeadmDNSDomain       = "cluster.local"
	kubeadmBindPort        = 6443
)

// ReadKubeadmConfig reads kubeadm's configuration file at path. A document
// that is not kubeadm's (another apiVersion, such as a KubeletConfiguration
// beside them) is skipped; a file with no kubeadm document, or one that
// does not parse, is an error naming the file. What the file omits takes
// kubeadm's default: the node name and advertise address (found from the
// host) and the Kubernetes version stay unset.
func ReadKubeadmConfig(path string) (*KubeadmConfig, error) {
	b, err := durable.ReadInput(path)
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
			cfg.BindPort = max(cfg.BindPort, d.LocalAPIEndpoint.BindPort)
		case "JoinConfiguration":
			cfg.NodeName = or(cfg.NodeName, d.NodeRegistration.Name)
			if d.ControlPlane != nil {
				cfg.AdvertiseAddress = or(cfg.AdvertiseAddress, d.ControlPlane.LocalAPIEndpoint.AdvertiseAddress)
				cfg.BindPort = max(cfg.BindPort, d.ControlPlane.LocalAPIEndpoint.BindPort)
			}
		case "ClusterConfiguration":
			cfg.KubernetesVersion = d.KubernetesVersion
			cfg.CertificatesDir = d.CertificatesDir
			cfg.ServiceSubnet = d.Networking.ServiceSubnet
			cfg.PodSubnet = d.Networking.PodSubnet
			cfg.DNSDomain = d.Networking.DNSDomain
			cfg.ExternalEtcd = d.Etcd.External != nil
			if d.Etcd.Local != nil {
				cfg.EtcdDataDir = d.Etcd.Local.DataDir
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("kubeadm configuration %s: no kubeadm.k8s.io document (InitConfiguration, ClusterConfiguration or JoinConfiguration)", path)
	}
	cfg.CertificatesDir = or(cfg.CertificatesDir, kubeadmCertificatesDir)
	cfg.ServiceSubnet = or(cfg.ServiceSubnet, kubeadmServiceSubnet)
	cfg.DNSDomain = or(cfg.DNSDomain, kubeadmDNSDomain)
	if !cfg.ExternalEtcd {
		cfg.EtcdDataDir = or(cfg.EtcdDataDir, kubeadmEtcdDataDir)
	}
	if cfg.BindPort == 0 {
		cfg.BindPort = kubeadmBindPort
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
