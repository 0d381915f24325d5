// Package cri is the node's container runtime as stratum-upgrade sees it:
// which CRI socket kubelet uses, and whether an image is present there or
// can be pulled through it. It talks CRI with k8s.io/cri-client, as
// kubelet and kubeadm do, so the runtime's own registry configuration
// (mirrors, credentials, TLS) applies to every pull.
package cri

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

// KubeletConfig is where kubeadm writes kubelet's configuration file; its
// containerRuntimeEndpoint is the socket kubelet pulls through.
const KubeletConfig = "/var/lib/kubelet/config.yaml"

// DefaultEndpoints are the sockets looked for, in order, when kubelet's
// configuration names none: containerd's, then CRI-O's (kubeadm's list).
var DefaultEndpoints = []Source{
	{Endpoint: "unix:///run/containerd/containerd.sock", From: "containerd's default socket"},
	{Endpoint: "unix:///var/run/crio/crio.sock", From: "CRI-O's default socket"},
}

// Source is a CRI endpoint and where it was found.
type Source struct {
	// Endpoint is a unix:// URL.
	Endpoint string
	// From says where it came from: "--cri-socket", "kubelet's
	// configuration /var/lib/kubelet/config.yaml", a default.
	From string
}

func (s Source) String() string { return s.Endpoint + " (" + s.From + ")" }

// ErrNoRuntime is wrapped by every *NoRuntimeError.
var ErrNoRuntime = errors.New("no container runtime answers")

// NoRuntimeError says that no runtime could be reached and what was tried.
type NoRuntimeError struct {
	// Tried is every endpoint looked at, with why it did not do.
	Tried []string
}

func (e *NoRuntimeError) Error() string {
	return ErrNoRuntime.Error() + ": " + strings.Join(e.Tried, "; ")
}

// Unwrap makes errors.Is(err, ErrNoRuntime) hold.
func (e *NoRuntimeError) Unwrap() error { return ErrNoRuntime }

// Normalize turns a socket path into a unix:// endpoint, as kubelet's
// --container-runtime-endpoint accepts both.
func Normalize(endpoint string) string {
	if strings.HasPrefix(endpoint, "/") {
		return "unix://" + endpoint
	}
	return endpoint
}

// Resolve is the endpoint to talk to: explicit (--cri-socket) when set;
// else the one the running kubelet was started with (ps finds it: its
// --container-runtime-endpoint, or the field in the file its --config
// names); else containerRuntimeEndpoint from kubelet's configuration file
// kubeletConfig when it exists and names one; else the first default
// socket that exists. A configuration that cannot be read or parsed is an
// error, not a reason to guess. No socket at all is a *NoRuntimeError.
func Resolve(explicit string, ps Processes, kubeletConfig string) (Source, error) {
	if explicit != "" {
		return Source{Endpoint: Normalize(explicit), From: "--cri-socket"}, nil
	}
	var tried []string
	if ps != nil {
		src, ok, note, err := fromRunningKubelet(ps)
		if err != nil {
			return Source{}, err
		}
		if ok {
			return src, nil
		}
		tried = append(tried, note)
	}
	if kubeletConfig != "" {
		ep, err := fromKubeletConfig(kubeletConfig)
		if err != nil {
			return Source{}, err
		}
		if ep != "" {
			return Source{Endpoint: Normalize(ep), From: "kubelet's configuration " + kubeletConfig}, nil
		}
		tried = append(tried, "kubelet's configuration "+kubeletConfig+" names no containerRuntimeEndpoint (or does not exist)")
	}
	for _, d := range DefaultEndpoints {
		path := strings.TrimPrefix(d.Endpoint, "unix://")
		_, err := os.Stat(path)
		if err == nil {
			return d, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %v", d, err))
	}
	return Source{}, &NoRuntimeError{Tried: tried}
}

// fromKubeletConfig is containerRuntimeEndpoint of the KubeletConfiguration
// at path; "" when the file does not exist or names none.
func fromKubeletConfig(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("kubelet's configuration: %w", err)
	}
	var cfg struct {
		Kind                     string `json:"kind"`
		ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("kubelet's configuration %s: %w", path, err)
	}
	if cfg.Kind != "KubeletConfiguration" {
		return "", fmt.Errorf("kubelet's configuration %s: kind %q, not KubeletConfiguration", path, cfg.Kind)
	}
	return cfg.ContainerRuntimeEndpoint, nil
}
