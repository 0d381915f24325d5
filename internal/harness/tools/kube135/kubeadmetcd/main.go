// Command kubeadmetcd writes the etcd static pod manifest that kubeadm of
// this module's version writes on a control-plane node joining a stacked
// etcd cluster (kubeadm join's control-plane-join etcd phase), without the
// live cluster that phase needs: there kubeadm adds the member as a learner
// and writes the pod with the member list the cluster answered; here the
// member list is given. Everything else is kubeadm's own code: the
// configuration file is loaded and defaulted by kubeadm's
// configutil.LoadOrDefaultInitConfiguration (as kubeadm init loads it), the
// pod comes from its etcd phase's GetEtcdPodSpec and is written by its
// staticpod.WriteStaticPodToDisk, so the bytes are those kubeadm writes.
//
//	kubeadmetcd --version                                    Kubernetes vX.Y.Z of this module (from -ldflags)
//	kubeadmetcd -config FILE -out DIR -member NAME=PEERURL... writes DIR/etcd.yaml
//
// The members are the etcd cluster's, in the order its member list
// answers (kubeadm keeps that order in --initial-cluster); this node must
// be one of them, under its node name and the peer URL kubeadm derives
// from its localAPIEndpoint. With no -member the pod is the one kubeadm
// init writes (a new one-member cluster).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/component-base/version"
	kubeadmapiv1 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	kubeadmconstants "k8s.io/kubernetes/cmd/kubeadm/app/constants"
	"k8s.io/kubernetes/cmd/kubeadm/app/features"
	etcdphase "k8s.io/kubernetes/cmd/kubeadm/app/phases/etcd"
	configutil "k8s.io/kubernetes/cmd/kubeadm/app/util/config"
	etcdutil "k8s.io/kubernetes/cmd/kubeadm/app/util/etcd"
	staticpodutil "k8s.io/kubernetes/cmd/kubeadm/app/util/staticpod"
)

// members is the repeatable -member flag.
type members []etcdutil.Member

func (m *members) String() string { return fmt.Sprint(*m) }

func (m *members) Set(s string) error {
	name, url, ok := strings.Cut(s, "=")
	if !ok || name == "" || url == "" {
		return fmt.Errorf("%q: want NAME=PEERURL", s)
	}
	*m = append(*m, etcdutil.Member{Name: name, PeerURL: url})
	return nil
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println("Kubernetes " + version.Get().GitVersion)
		return
	}
	cfgPath := flag.String("config", "", "kubeadm configuration file: InitConfiguration and ClusterConfiguration (required)")
	out := flag.String("out", "", "directory to write etcd.yaml into (required)")
	var ms members
	flag.Var(&ms, "member", "an etcd member NAME=PEERURL, repeated in the member list's order")
	flag.Parse()
	if *cfgPath == "" || *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: kubeadmetcd --version | kubeadmetcd -config FILE -out DIR [-member NAME=PEERURL]...")
		os.Exit(2)
	}
	if err := write(*cfgPath, *out, ms); err != nil {
		fmt.Fprintln(os.Stderr, "kubeadmetcd:", err)
		os.Exit(1)
	}
}

func write(cfgPath, out string, ms members) error {
	// As kubeadm init: the versioned defaults are overridden by the file.
	cfg, err := configutil.LoadOrDefaultInitConfiguration(cfgPath, &kubeadmapiv1.InitConfiguration{}, &kubeadmapiv1.ClusterConfiguration{},
		configutil.LoadOrDefaultConfigurationOptions{SkipCRIDetect: true})
	if err != nil {
		return fmt.Errorf("load %s: %w", cfgPath, err)
	}
	if cfg.Etcd.External != nil {
		return fmt.Errorf("%s: external etcd: kubeadm writes no etcd manifest", cfgPath)
	}
	// kubeadm would also rewrite the pod to run as non-root, and patch it;
	// neither is reproduced here.
	if features.Enabled(cfg.FeatureGates, features.RootlessControlPlane) {
		return fmt.Errorf("%s: feature gate %s is not supported here", cfgPath, features.RootlessControlPlane)
	}
	if cfg.Patches != nil && cfg.Patches.Directory != "" {
		return fmt.Errorf("%s: patches are not supported here", cfgPath)
	}
	if len(ms) > 0 {
		self := etcdutil.GetPeerURL(&cfg.LocalAPIEndpoint)
		found := false
		for _, m := range ms {
			if m.Name == cfg.NodeRegistration.Name {
				if m.PeerURL != self {
					return fmt.Errorf("member %s: peer URL %s, but kubeadm derives %s from localAPIEndpoint", m.Name, m.PeerURL, self)
				}
				found = true
			}
		}
		if !found {
			return fmt.Errorf("node %s is not among the members %v: kubeadm's list holds the joining member", cfg.NodeRegistration.Name, ms)
		}
	}
	spec := etcdphase.GetEtcdPodSpec(&cfg.ClusterConfiguration, &cfg.LocalAPIEndpoint, cfg.NodeRegistration.Name, ms)
	if err := staticpodutil.WriteStaticPodToDisk(kubeadmconstants.Etcd, out, spec); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}
