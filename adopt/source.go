// Package adopt takes over a control-plane node whose static pod manifests
// another tool wrote (kubeadm): it derives the node state those manifests
// run and says, per component, whether rendering that state would make
// kubelet restart the component, and why.
//
// It reads only: ReadKubeadm reads the manifest directory (and kubeadm's
// configuration file when there is one), Derive builds the node state,
// Check renders it and compares each pod with the one kubelet runs
// (kubeletpod.Same). Writing the state and the manifests is the caller's
// (`stratum-upgrade init --from-kubeadm`).
package adopt

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ciq/stratum-upgrade/durable"
	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// ErrNotAdoptable is wrapped by every refusal to adopt a node: an external
// etcd, an unknown file in the manifest directory, a manifest that is not
// a component's as kubeadm writes it.
var ErrNotAdoptable = errors.New("cannot adopt this node")

func refuse(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrNotAdoptable, fmt.Sprintf(format, a...))
}

// Source is a node's manifest directory as kubeadm left it.
type Source struct {
	// Dir is the manifest directory.
	Dir string
	// Files maps each component found to its manifest's path.
	Files map[string]string
	// Pods maps each component to its pod as kubelet decodes it (no
	// defaults applied).
	Pods map[string]*corev1.Pod
	// Raw maps each component to its manifest's bytes.
	Raw map[string][]byte
	// Config is kubeadm's configuration file as read, nil without one.
	Config *KubeadmConfig
}

// ReadKubeadm reads the static pods in dir as kubelet would: every regular
// file whose name does not start with a dot. It refuses (ErrNotAdoptable)
// a directory that holds anything but the control-plane components'
// manifests, each named <component>.yaml and holding the pod of that
// name (kubeadm's layout; stratum will be the directory's sole writer and
// would not know what to do with another file), a symlink or a
// subdirectory, a component twice, a node without kube-apiserver,
// kube-controller-manager and kube-scheduler, and a node without a local
// etcd (ErrExternalEtcd). configFile, when not "", is kubeadm's
// configuration file (ReadKubeadmConfig).
func ReadKubeadm(dir, configFile string) (*Source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read the manifest directory: %w", err)
	}
	src := &Source{Dir: dir, Files: map[string]string{}, Pods: map[string]*corev1.Pod{}, Raw: map[string][]byte{}}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue // kubelet skips hidden files
		}
		path := filepath.Join(dir, name)
		if e.Type()&fs.ModeSymlink != 0 {
			return nil, refuse("%s is a symlink: stratum writes regular files only; replace it with the file it points to", path)
		}
		if e.IsDir() {
			return nil, refuse("%s is a directory: kubelet does not read it, and stratum must own everything in %s; move it out", path, dir)
		}
		comp := componentOfFile(name)
		if comp == "" {
			return nil, refuse("%s is not a control-plane component's manifest (stratum renders %s): move it out of %s, or run it some other way, first",
				path, strings.Join(manifest.Names, ", "), dir)
		}
		b, _, err := durable.ReadRegular(path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		pod, err := kubeletpod.Decode(b)
		if err != nil {
			return nil, refuse("%s: %v", path, err)
		}
		if pod.Name != comp {
			return nil, refuse("%s holds pod %q, not %q: a manifest renamed or edited by hand; restore kubeadm's", path, pod.Name, comp)
		}
		if len(pod.Spec.Containers) != 1 {
			return nil, refuse("%s has %d containers; kubeadm writes one", path, len(pod.Spec.Containers))
		}
		if prev, dup := src.Files[comp]; dup {
			return nil, refuse("%s and %s are both %s's manifest: kubelet would run one of them; remove the other", prev, path, comp)
		}
		src.Files[comp], src.Pods[comp], src.Raw[comp] = path, pod, b
	}
	for _, c := range []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler} {
		if src.Files[c] == "" {
			return nil, refuse("%s has no %s.yaml: not a kubeadm control-plane node (or one component was removed by hand)", dir, c)
		}
	}
	if configFile != "" {
		if src.Config, err = ReadKubeadmConfig(configFile); err != nil {
			return nil, err
		}
		if src.Config.ExternalEtcd {
			return nil, fmt.Errorf("%w: %s configures an external etcd (etcd.external)", ErrExternalEtcd, configFile)
		}
	}
	if src.Files[nodestate.Etcd] == "" {
		servers := flagsOf(src.Pods[nodestate.KubeAPIServer])["etcd-servers"]
		return nil, fmt.Errorf("%w: %s has no etcd.yaml, and kube-apiserver's --etcd-servers=%s", ErrExternalEtcd, dir, servers)
	}
	return src, nil
}

// ErrExternalEtcd is a node whose etcd kubeadm did not run as a static pod:
// stratum upgrades etcd with the rest of the node, so it does not adopt
// one whose etcd is someone else's.
var ErrExternalEtcd = fmt.Errorf("%w: the node uses an external etcd, which stratum does not manage (it runs etcd as a static pod on every control-plane node)", ErrNotAdoptable)

// componentOfFile is the component whose manifest kubeadm names file:
// <component>.yaml (.yml and .json accepted, as kubelet reads them).
func componentOfFile(file string) string {
	ext := filepath.Ext(file)
	if ext != ".yaml" && ext != ".yml" && ext != ".json" {
		return ""
	}
	name := strings.TrimSuffix(file, ext)
	if slices.Contains(manifest.Names, name) {
		return name
	}
	return ""
}

// Components is the components found, in roster order.
func (s *Source) Components() []string {
	out := make([]string, 0, len(s.Files))
	for _, c := range manifest.Names {
		if s.Files[c] != "" {
			out = append(out, c)
		}
	}
	return out
}

// argsOf is a pod's first container's --flag=value arguments (command
// then args) in order, each value of a flag given more than once an Arg of
// its own, names without the dashes.
func argsOf(pod *corev1.Pod) []nodestate.Arg {
	if pod == nil || len(pod.Spec.Containers) == 0 {
		return nil
	}
	c := pod.Spec.Containers[0]
	var out []nodestate.Arg
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		out = append(out, nodestate.Arg{Name: k, Value: v})
	}
	return out
}

// flagsOf is a pod's flags by name (argsOf), a flag given twice with its
// last value, as the components parse a single-valued flag: the node
// state's fields come from such flags. valuesOf keeps every value.
func flagsOf(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, a := range argsOf(pod) {
		out[a.Name] = a.Value
	}
	return out
}

// valuesOf is each flag's values in command-line order.
func valuesOf(args []nodestate.Arg) map[string][]string {
	out := map[string][]string{}
	for _, a := range args {
		out[a.Name] = append(out[a.Name], a.Value)
	}
	return out
}
