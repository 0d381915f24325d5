package testbed

// This file holds the node's image map: the component images, their modes, and what runs each.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubeletsim"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// Kubernetes and kube-vip image tags mapped to the component stand-in on
// every node, so a release moving between them finds its images.
var (
	KubeTags    = []string{"v1.34.4", "v1.34.5"}
	KubeVIPTags = []string{"v0.8.9", "v0.9.2"}
)

// NextMinorTag is a Kubernetes tag one minor past KubeTags, mapped to the
// healthy stand-in on every node: a minor move (a two-step upgrade's) on
// the test bed.
const NextMinorTag = "v1.35.4"

// Image repositories of the components, as the node states spell them.
var Repos = map[string]string{
	nodestate.KubeAPIServer:     "registry.k8s.io/kube-apiserver",
	nodestate.ControllerManager: "registry.k8s.io/kube-controller-manager",
	nodestate.Scheduler:         "registry.k8s.io/kube-scheduler",
	nodestate.KubeVIP:           "ghcr.io/kube-vip/kube-vip",
}

// ModeImage is the image reference that runs component's stand-in in mode:
// the component's repository at tag with "-<mode>" appended
// ("registry.k8s.io/kube-scheduler:v1.34.5-exit-at-start"). Every node maps
// it for every tag in KubeTags/KubeVIPTags and every standin.Modes; the
// plain tag runs ModeHealthy.
func ModeImage(component, tag string, mode standin.Mode) string {
	ref := Repos[component] + ":" + tag
	if mode != "" && mode != standin.ModeHealthy {
		ref += "-" + string(mode)
	}
	return ref
}

// writeImageMap maps every etcd build, every
// stand-in image in every mode, the real control plane of every
// kubebuild.Versions version built (registry.k8s.io/kube-apiserver:v1.36.3),
// and the state's own images (an etcd image the map lacks runs etcd 3.5).
func (n *Node) writeImageMap(bins *binaries, extra kubeletsim.ImageMap) error {
	m := kubeletsim.ImageMap{}
	marker := func(env map[string]string) map[string]string {
		out := map[string]string{MarkerEnv: n.Root}
		for k, v := range env {
			out[k] = v
		}
		return out
	}
	var etcd35 string
	for _, b := range etcdbuild.Builds {
		path, err := etcdbuild.Binary(b.Minor)
		if err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		if etcd35 == "" {
			etcd35 = path
		}
		m[b.Image] = kubeletsim.Image{Binary: path, Env: marker(nil)}
	}
	binDir := filepath.Join(n.Root, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	for comp := range Repos {
		// The program is exec'd under the component's own name, so the
		// kernel's comm matches what a node shows, not just argv[0].
		link := filepath.Join(binDir, comp)
		if err := os.Symlink(bins.component, link); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("testbed: %w", err)
		}
		tags, modes := KubeTags, map[string][]standin.Mode{}
		if comp == nodestate.KubeVIP {
			tags = KubeVIPTags
		} else {
			modes[NextMinorTag] = []standin.Mode{standin.ModeHealthy}
		}
		for _, tag := range tags {
			modes[tag] = standin.Modes
		}
		for tag, tagModes := range modes {
			for _, mode := range tagModes {
				m[ModeImage(comp, tag, mode)] = kubeletsim.Image{Binary: link, Env: marker(map[string]string{
					standin.EnvMode: string(mode), standin.EnvEvents: n.EventsFile,
				})}
			}
		}
	}
	for _, v := range kubebuild.Versions {
		if !kubebuild.Built(v) {
			continue
		}
		paths, err := kubebuild.Paths(v)
		if err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		for _, comp := range kubebuild.Components {
			m[Repos[comp]+":"+v] = kubeletsim.Image{Binary: paths[comp], Env: marker(nil)}
		}
	}
	for comp, ref := range n.State.Images {
		if _, ok := m[ref]; ok {
			continue
		}
		if comp == nodestate.Etcd {
			m[ref] = kubeletsim.Image{Binary: etcd35, Env: marker(nil)}
		} else {
			m[ref] = kubeletsim.Image{Binary: filepath.Join(binDir, comp), Env: marker(map[string]string{standin.EnvEvents: n.EventsFile})}
		}
	}
	for ref, img := range extra {
		img.Env = marker(img.Env)
		m[ref] = img
	}
	return m.Save(n.ImageMapFile)
}

// MapImage adds or replaces ref in the node's image map; the stand-in reads
// the map at every container start. img.Env gets MarkerEnv added.
func (n *Node) MapImage(ref string, img kubeletsim.Image) error {
	m, err := kubeletsim.LoadImageMap(n.ImageMapFile)
	if err != nil {
		return err
	}
	env := map[string]string{MarkerEnv: n.Root}
	for k, v := range img.Env {
		env[k] = v
	}
	img.Env = env
	m[ref] = img
	tmp := n.ImageMapFile + ".new"
	if err := m.Save(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, n.ImageMapFile)
}

// StandinBinary is the component stand-in installed under component's name
// in this node (for MapImage).
func (n *Node) StandinBinary(component string) string { return filepath.Join(n.Root, "bin", component) }
