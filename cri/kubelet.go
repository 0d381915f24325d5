package cri

// The runtime the running kubelet was started with: its
// --container-runtime-endpoint flag, or containerRuntimeEndpoint in the
// configuration file its --config names. This is what kubelet itself pulls
// through, whatever kubeadm wrote at bootstrap.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ciq/stratum-upgrade/proc"
)

// Processes finds the running kubelet; *proc.Scanner satisfies it.
type Processes interface {
	PIDs(binary string) ([]proc.Process, error)
}

// fromRunningKubelet is the endpoint of the running kubelet. ok is false
// when no kubelet runs, it names none, or several disagree; note then
// says why, for a *NoRuntimeError.
func fromRunningKubelet(ps Processes) (src Source, ok bool, note string, err error) {
	kubelets, err := ps.PIDs("kubelet")
	if err != nil {
		return Source{}, false, "", fmt.Errorf("the running kubelet: %w", err)
	}
	found := map[string]Source{}
	for _, k := range kubelets {
		s, ok, err := kubeletEndpoint(k.PID)
		if err != nil {
			return Source{}, false, "", err
		}
		if ok {
			found[s.Endpoint] = s
		}
	}
	switch len(found) {
	case 0:
		if len(kubelets) == 0 {
			return Source{}, false, "no kubelet process runs", nil
		}
		return Source{}, false, "the running kubelet names no container runtime endpoint", nil
	case 1:
		for _, s := range found {
			return s, true, "", nil
		}
	}
	var eps []string
	for ep := range found {
		eps = append(eps, ep)
	}
	return Source{}, false, fmt.Sprintf("%d kubelet processes name different container runtime endpoints (%s)", len(found), strings.Join(eps, ", ")), nil
}

// kubeletEndpoint is the endpoint kubelet pid was started with: its flag,
// else its configuration file's field. A kubelet that exited meanwhile
// names none.
func kubeletEndpoint(pid int) (Source, bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return Source{}, false, nil
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if ep := flagValue(args, "container-runtime-endpoint"); ep != "" {
		return Source{Endpoint: Normalize(ep), From: fmt.Sprintf("the running kubelet's --container-runtime-endpoint (pid %d)", pid)}, true, nil
	}
	cfg := flagValue(args, "config")
	if cfg == "" {
		return Source{}, false, nil
	}
	if !filepath.IsAbs(cfg) {
		cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if err != nil {
			return Source{}, false, nil
		}
		cfg = filepath.Join(cwd, cfg)
	}
	ep, err := fromKubeletConfig(cfg)
	if err != nil || ep == "" {
		return Source{}, false, err
	}
	return Source{Endpoint: Normalize(ep), From: fmt.Sprintf("the running kubelet's --config %s (pid %d)", cfg, pid)}, true, nil
}

// flagValue is the value of --name in args (--name=V or --name V), the
// last one winning as in pflag; "" when absent.
func flagValue(args []string, name string) string {
	var v string
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--"+name+"="):
			v = strings.TrimPrefix(a, "--"+name+"=")
		case a == "--"+name && i+1 < len(args):
			v = args[i+1]
		}
	}
	return v
}
