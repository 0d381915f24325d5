package kubeapi

// kubeadm's ClusterConfiguration in the kube-system/kubeadm-config
// ConfigMap, kept at the versions the node runs: a later `kubeadm join
// --control-plane` (and `kubeadm upgrade node`) reads it there, through
// kubeadm's uploadconfig phase's ConfigMap and key.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// kubeadm's names (cmd/kubeadm/app/constants: KubeadmConfigConfigMap,
// ClusterConfigurationConfigMapKey).
const (
	ConfigMapNamespace = metav1.NamespaceSystem
	ConfigMapName      = "kubeadm-config"
	ConfigMapKey       = "ClusterConfiguration"
)

// ErrNotKubeadm: the cluster has no kubeadm-config ConfigMap (kubeadm did
// not make it), so there is nothing to keep.
var ErrNotKubeadm = errors.New("no kube-system/kubeadm-config ConfigMap: not a kubeadm cluster")

// ErrClusterConfiguration: the ConfigMap's ClusterConfiguration is not one
// this package can edit (no such key, not YAML, no document of that kind).
var ErrClusterConfiguration = errors.New("kubeadm's ClusterConfiguration cannot be edited")

// ClusterVersions is what of the node's versions kubeadm's
// ClusterConfiguration says.
type ClusterVersions struct {
	KubernetesVersion string `json:"kubernetesVersion"`
	// ImageRepository is the repository of the Kubernetes components'
	// images (kubeadm's imageRepository).
	ImageRepository string `json:"imageRepository"`
	// EtcdImage is etcd's image, <repository>/etcd:<tag>.
	EtcdImage string `json:"etcdImage"`
}

// Edited is the result of EditClusterConfiguration.
type Edited struct {
	Data    string
	Changed bool
	// Notes say what was left as it was, and why.
	Notes []string
}

// EditClusterConfiguration sets kubernetesVersion, imageRepository and
// etcd's image (etcd.local.imageRepository and imageTag, kubeadm's
// fields for it) in the ClusterConfiguration document of data, a YAML
// stream as kubeadm stores it, and keeps every other field, the
// document's apiVersion and every other document. Data is re-encoded only
// when something changed.
func EditClusterConfiguration(data string, v ClusterVersions) (Edited, error) {
	var docs []*yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(data))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Edited{}, fmt.Errorf("%w: %s: %w", ErrClusterConfiguration, ConfigMapKey, err)
		}
		docs = append(docs, &doc)
	}
	var cc *yaml.Node
	for _, d := range docs {
		if len(d.Content) == 1 && d.Content[0].Kind == yaml.MappingNode && scalar(d.Content[0], "kind") == "ClusterConfiguration" {
			if cc != nil {
				return Edited{}, fmt.Errorf("%w: %s: two ClusterConfiguration documents", ErrClusterConfiguration, ConfigMapKey)
			}
			cc = d.Content[0]
		}
	}
	if cc == nil {
		return Edited{}, fmt.Errorf("%w: %s: no document of kind ClusterConfiguration", ErrClusterConfiguration, ConfigMapKey)
	}
	ed := Edited{Data: data}
	set := func(m *yaml.Node, key, value string) {
		if value != "" && setScalar(m, key, value) {
			ed.Changed = true
		}
	}
	set(cc, "kubernetesVersion", v.KubernetesVersion)
	set(cc, "imageRepository", v.ImageRepository)
	if note := editEtcd(cc, v, set); note != "" {
		ed.Notes = append(ed.Notes, note)
	}
	if !ed.Changed {
		return ed, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return Edited{}, fmt.Errorf("%w: %s: %w", ErrClusterConfiguration, ConfigMapKey, err)
		}
	}
	if err := enc.Close(); err != nil {
		return Edited{}, fmt.Errorf("%w: %s: %w", ErrClusterConfiguration, ConfigMapKey, err)
	}
	ed.Data = buf.String()
	return ed, nil
}

// editEtcd sets etcd.local's image fields to v.EtcdImage; it returns why
// it did not, when kubeadm's fields cannot say that image.
func editEtcd(cc *yaml.Node, v ClusterVersions, set func(*yaml.Node, string, string)) string {
	if v.EtcdImage == "" {
		return ""
	}
	etcd := child(cc, "etcd", true)
	if child(etcd, "external", false) != nil {
		return "etcd is external in the ClusterConfiguration: its image is left as it is"
	}
	slash := strings.LastIndex(v.EtcdImage, "/")
	colon := strings.LastIndex(v.EtcdImage, ":")
	if slash < 0 || colon < slash || v.EtcdImage[slash+1:colon] != "etcd" || strings.Contains(v.EtcdImage, "@") {
		return fmt.Sprintf("etcd's image %s is not <repository>/etcd:<tag>, which is all kubeadm's etcd.local can say: left as it is", v.EtcdImage)
	}
	repo, tag := v.EtcdImage[:slash], v.EtcdImage[colon+1:]
	local := child(etcd, "local", true)
	// kubeadm takes etcd's repository from imageRepository unless
	// etcd.local.imageRepository says another.
	if repo != v.ImageRepository || child(local, "imageRepository", false) != nil {
		set(local, "imageRepository", repo)
	}
	set(local, "imageTag", tag)
	return ""
}

// child is the value of key in mapping m; with create, an empty mapping
// is added when the key is missing or null.
func child(m *yaml.Node, key string, create bool) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			v := m.Content[i+1]
			if create && v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				*v = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			return v
		}
	}
	if !create {
		return nil
	}
	v := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	return v
}

// scalar is the string value of key in mapping m ("" when absent).
func scalar(m *yaml.Node, key string) string {
	if v := child(m, key, false); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// setScalar sets key in mapping m to the string value; it says whether
// that changed anything.
func setScalar(m *yaml.Node, key, value string) bool {
	if v := child(m, key, false); v != nil {
		if v.Kind == yaml.ScalarNode && v.Value == value {
			return false
		}
		*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
		return true
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
	return true
}

// UpdateKubeadmConfig writes v into the kubeadm-config ConfigMap's
// ClusterConfiguration (EditClusterConfiguration), retrying a write that
// raced another. ErrNotKubeadm when the ConfigMap does not exist.
func UpdateKubeadmConfig(ctx context.Context, cs API, v ClusterVersions) (Edited, error) {
	var ed Edited
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cs.GetConfigMap(ctx, ConfigMapNamespace, ConfigMapName)
		if apierrors.IsNotFound(err) {
			return ErrNotKubeadm
		}
		if err != nil {
			return err
		}
		data, ok := cm.Data[ConfigMapKey]
		if !ok {
			return fmt.Errorf("%w: no key %s", ErrClusterConfiguration, ConfigMapKey)
		}
		if ed, err = EditClusterConfiguration(data, v); err != nil || !ed.Changed {
			return err
		}
		cm.Data[ConfigMapKey] = ed.Data
		return cs.UpdateConfigMap(ctx, cm)
	})
	if err != nil && !errors.Is(err, ErrNotKubeadm) {
		err = fmt.Errorf("%s/%s: %w", ConfigMapNamespace, ConfigMapName, err)
	}
	return ed, err
}
