// Package kubeadmgen makes the real kubeadm write the static pod manifests
// of a control-plane node, without any cluster, for the tests of adopting
// a kubeadm node: the fixtures under testdata/kubeadm/<version>/<config>/
// are its output (make kubeadm-fixtures), and TestRealKubeadmFixtures
// checks that they still are.
//
// The programs are kubebuild.KubeadmTools of the version, built from its
// tool module: kubeadm itself, kubeletuid and kubeadmetcd. Generate runs
// kubeadm's own init phases, `kubeadm init phase control-plane all` and
// `kubeadm init phase etcd local`, with --rootfs: kubeadm chroots into a
// fresh directory and writes <root>/etc/kubernetes/manifests exactly as
// kubeadm init writes /etc/kubernetes/manifests (the phases are init's
// own, not a dry run). The chroot also makes the output independent of the
// machine it runs on: kubeadm mounts the CA certificate directories it
// finds on the host (/etc/ca-certificates, /etc/pki/ca-trust, ...), and in
// the root only a Config's HostDirs exist. A node joined to an existing
// etcd cluster cannot be made by kubeadm without that cluster (join adds
// the member first), so its etcd manifest is written by kubeadmetcd,
// which runs kubeadm's own configuration loading, GetEtcdPodSpec and
// static pod writer with the member list given; its other manifests come
// from the same kubeadm phase as init's (join runs the same
// CreateStaticPodFiles).
package kubeadmgen

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"text/template"
)

// Config is a named kubeadm configuration, its file configs/<Name>.yaml:
// an InitConfiguration and a ClusterConfiguration whose kubernetesVersion
// is the version generated for.
type Config struct {
	// Name names the configuration and its fixture directory.
	Name string
	// NodeName is the file's nodeRegistration.name: the node kubelet
	// computes the pod UIDs for.
	NodeName string
	// Members is the etcd member list of a node joining an existing stacked
	// etcd cluster, NAME=PEERURL in the list's order, this node among
	// them. Empty for a node kubeadm init makes (a new one-member cluster).
	Members []string
	// HostDirs are the directories that exist in the node's root file
	// system when kubeadm runs: it mounts those of the CA certificate
	// directories it looks for.
	HostDirs []string
}

// The files of a configuration's node besides HostDirs, if any, are the
// tree configs/<Name>/ (RootFiles): the patches directory kubeadm reads,
// the files an extra volume mounts.

// Debian and RHEL are the CA certificate directories kubeadm finds on a
// Debian or Ubuntu host and on a RHEL-like one.
var (
	Debian = []string{"/etc/ssl/certs", "/etc/ca-certificates", "/usr/share/ca-certificates", "/usr/local/share/ca-certificates"}
	RHEL   = []string{"/etc/ssl/certs", "/etc/pki/ca-trust", "/etc/pki/tls/certs"}
)

// Configs are the configurations the fixtures are made of; each file's
// first comment says what it is.
var Configs = []Config{
	{Name: "defaults", NodeName: "cp-1", HostDirs: Debian},
	{Name: "extra-args", NodeName: "cp-1", HostDirs: Debian},
	{Name: "custom-paths", NodeName: "cp-1", HostDirs: RHEL},
	{Name: "joined", NodeName: "cp-3", HostDirs: Debian, Members: []string{
		"cp-1=https://10.0.0.11:2380", "cp-2=https://10.0.0.12:2380", "cp-3=https://10.0.0.13:2380",
	}},
	{Name: "audit", NodeName: "cp-1", HostDirs: Debian},
	{Name: "proxy-env", NodeName: "cp-1", HostDirs: Debian},
	{Name: "patches", NodeName: "cp-1", HostDirs: Debian},
	{Name: "image-repo", NodeName: "cp-1", HostDirs: RHEL},
	{Name: "ipv6", NodeName: "cp-1", HostDirs: Debian},
	{Name: "dual-stack", NodeName: "cp-1", HostDirs: Debian},
	{Name: "feature-gates", NodeName: "cp-1", HostDirs: Debian},
	{Name: "repeated-flag", NodeName: "cp-1", HostDirs: Debian},
}

//go:embed configs
var configFiles embed.FS

// Lookup is the configuration named name.
func Lookup(name string) (Config, error) {
	var names []string
	for _, c := range Configs {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return Config{}, fmt.Errorf("kubeadm configuration %q: no such configuration (known: %s)", name, strings.Join(names, ", "))
}

// File is the kubeadm configuration file of c for Kubernetes version.
func (c Config) File(version string) ([]byte, error) {
	src, err := configFiles.ReadFile("configs/" + c.Name + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("kubeadm configuration %s: %w", c.Name, err)
	}
	tmpl, err := template.New(c.Name).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("kubeadm configuration %s: %w", c.Name, err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, struct{ KubernetesVersion string }{version}); err != nil {
		return nil, fmt.Errorf("kubeadm configuration %s: %w", c.Name, err)
	}
	return b.Bytes(), nil
}

// RootFiles are the files of c's node besides its HostDirs, by absolute
// slash path (/etc/kubernetes/patches/etcd+strategic.yaml): the tree
// configs/<Name>/, none for most configurations.
func (c Config) RootFiles() (map[string][]byte, error) {
	dir := "configs/" + c.Name
	files := map[string][]byte{}
	err := fs.WalkDir(configFiles, dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return fs.SkipAll
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, err := configFiles.ReadFile(p)
		if err != nil {
			return err
		}
		files[strings.TrimPrefix(p, dir)] = b
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubeadm configuration %s: %w", c.Name, err)
	}
	return files, nil
}
