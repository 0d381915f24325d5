package manifest

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/versions"
)

// kubeadm's probe timings (cmd/kubeadm/app/util/staticpod): liveness waits
// one period and allows 8 failures, readiness polls every second, startup
// allows the control-plane health check timeout (4m) in 10s periods.
const (
	probeTimeoutSeconds         = 15
	livenessInitialDelaySeconds = 10
	livenessPeriodSeconds       = 10
	livenessFailureThreshold    = 8
	readinessPeriodSeconds      = 1
	readinessFailureThreshold   = 3
	startupPeriodSeconds        = 10
	startupFailureThreshold     = 24
)

// ProbePortName is the name of the container port every probe of a
// kubeadm pod names instead of a number (kubeadmconstants.ProbePort).
const ProbePortName = "probe-port"

// probeEndpoint is where a component's probes go.
type probeEndpoint struct {
	scheme corev1.URIScheme
	// host is what stratum dials to check the component (Target); podHost
	// is the probes' host field as kubeadm writes it: "" (kubelet then
	// probes the pod's IP, the host's) for a listener on every address,
	// where host is the loopback address.
	host, podHost       string
	port                int
	liveness, readiness string // paths; readiness "" means no readiness probe
	startup             string
}

func (e probeEndpoint) url(p string) string {
	return strings.ToLower(string(e.scheme)) + "://" + hostPort(e.host, e.port) + p
}

// probeHost is the address a probe of a listener bound to bind reaches: the
// bind address itself, or loopback for an unspecified (all-addresses) one.
func probeHost(st *nodestate.NodeState, bind string) string {
	if ip := net.ParseIP(bind); ip != nil && !ip.IsUnspecified() {
		return bind
	}
	return loopback(st)
}

// podProbeHost is kubeadm's probe host for a listener address given by a
// flag (GetControllerManagerProbeAddress and friends): def when the flag
// is not set, "" for an unspecified address (0.0.0.0 or ::), else the
// address as written.
func podProbeHost(addr, def string) string {
	switch addr {
	case "":
		return def
	case "0.0.0.0", "::":
		return ""
	}
	return addr
}

// probeFor derives a component's probe endpoint from its final flags, so an
// extra arg that moves a listener moves its probes and its Target with it.
func probeFor(st *nodestate.NodeState, name string, a args, v *version.Version) (probeEndpoint, bool) {
	port := func(def int) int {
		if p, err := strconv.Atoi(a["secure-port"]); err == nil {
			return p
		}
		return def
	}
	// The probes are kubeadm's (staticpodutil.LivenessProbe and friends
	// in cmd/kubeadm/app/phases/controlplane/manifests.go and
	// phases/etcd/local.go, the same from 1.34 to 1.37).
	switch name {
	case nodestate.Etcd:
		form := versions.Etcd(v)
		e := probeEndpoint{scheme: corev1.URISchemeHTTP, host: loopback(st), podHost: loopback(st), port: st.Ports.EtcdMetrics,
			liveness: form.Liveness, readiness: form.Readiness, startup: form.Startup}
		first, _, _ := strings.Cut(a["listen-metrics-urls"], ",")
		if u, err := url.Parse(first); err == nil && u.Port() != "" {
			if p, err := strconv.Atoi(u.Port()); err == nil {
				e.port = p
				e.host = probeHost(st, u.Hostname())
				if h := u.Hostname(); h != "" {
					e.podHost = h
				}
				if u.Scheme == "https" {
					e.scheme = corev1.URISchemeHTTPS
				}
			}
		}
		return e, true
	case nodestate.KubeAPIServer:
		// kubeadm probes the advertise address (GetAPIServerProbeAddress).
		return probeEndpoint{scheme: corev1.URISchemeHTTPS, host: probeHost(st, a["bind-address"]),
			podHost: podProbeHost(a["advertise-address"], loopback(st)), port: port(st.Ports.APIServer),
			liveness: "/livez", readiness: "/readyz", startup: "/livez"}, true
	case nodestate.ControllerManager:
		return probeEndpoint{scheme: corev1.URISchemeHTTPS, host: probeHost(st, a["bind-address"]),
			podHost: podProbeHost(a["bind-address"], "127.0.0.1"), port: port(st.Ports.ControllerManager),
			liveness: "/healthz", startup: "/healthz"}, true
	case nodestate.Scheduler:
		return probeEndpoint{scheme: corev1.URISchemeHTTPS, host: probeHost(st, a["bind-address"]),
			podHost: podProbeHost(a["bind-address"], "127.0.0.1"), port: port(st.Ports.Scheduler),
			liveness: "/livez", readiness: "/readyz", startup: "/livez"}, true
	}
	return probeEndpoint{}, false
}

func httpProbe(e probeEndpoint, p string, initialDelay, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host:   e.podHost,
			Path:   p,
			Port:   intstr.FromString(ProbePortName),
			Scheme: e.scheme,
		}},
		InitialDelaySeconds: initialDelay,
		TimeoutSeconds:      probeTimeoutSeconds,
		PeriodSeconds:       period,
		FailureThreshold:    failures,
	}
}

// setProbes sets kubeadm's three probes on c, and the container port they
// name (ProbePortName).
func setProbes(c *corev1.Container, e probeEndpoint) {
	c.Ports = []corev1.ContainerPort{{Name: ProbePortName, ContainerPort: int32(e.port), Protocol: corev1.ProtocolTCP}}
	c.LivenessProbe = httpProbe(e, e.liveness, livenessInitialDelaySeconds, livenessPeriodSeconds, livenessFailureThreshold)
	if e.readiness != "" {
		c.ReadinessProbe = httpProbe(e, e.readiness, 0, readinessPeriodSeconds, readinessFailureThreshold)
	}
	c.StartupProbe = httpProbe(e, e.startup, startupPeriodSeconds, startupPeriodSeconds, startupFailureThreshold)
}
