package kubeletmodel

// Listeners: two instances of a component on one port, as the component
// stand-in (internal/harness/standin) and the real components bind it.
// Linux lets a second socket bind a port only when every socket on it set
// SO_REUSEPORT, which --permit-port-sharing asks for (k8s.io/apiserver's
// SecureServingOptions). A container that cannot bind exits at start, as
// the stand-in does on EADDRINUSE.

import (
	"net"
	"path"
	"strconv"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
)

// listener is where a container's process listens.
type listener struct {
	host  string // as --bind-address has it; "" and unspecified are every address
	port  int
	share bool // --permit-port-sharing: SO_REUSEPORT
}

// listenerOf reads argv as the component stand-in does: --secure-port
// (default the component's port), --bind-address, --permit-port-sharing
// (a pflag bool: bare is true, a value follows "="). ok is false for a
// component without a listener or an argv the stand-in would refuse.
func listenerOf(argv []string) (l listener, ok bool) {
	if len(argv) == 0 {
		return listener{}, false
	}
	comp, known := standin.Components[path.Base(argv[0])]
	if !known || comp.DefaultPort == 0 {
		return listener{}, false
	}
	l.port = comp.DefaultPort
	rest := argv[1:]
	for i := 0; i < len(rest); i++ {
		name, val, hasVal := strings.Cut(strings.TrimLeft(rest[i], "-"), "=")
		if !strings.HasPrefix(rest[i], "-") {
			continue
		}
		if (name == "secure-port" || name == "bind-address") && !hasVal {
			if i+1 >= len(rest) {
				return listener{}, false
			}
			i++
			val = rest[i]
		}
		var err error
		switch name {
		case "secure-port":
			if l.port, err = strconv.Atoi(val); err != nil {
				return listener{}, false
			}
		case "bind-address":
			l.host = val
		case "permit-port-sharing":
			l.share = true
			if hasVal {
				if l.share, err = strconv.ParseBool(val); err != nil {
					return listener{}, false
				}
			}
		}
	}
	return l, l.port != 0
}

// overlaps is whether two binds of the same port collide: the same
// address, or either on every address.
func (l listener) overlaps(o listener) bool {
	if l.port != o.port {
		return false
	}
	every := func(h string) bool { ip := net.ParseIP(h); return h == "" || ip != nil && ip.IsUnspecified() }
	return every(l.host) || every(o.host) || l.host == o.host
}

// listens is whether a process in mode m opens its listener.
func listens(m standin.Mode) bool {
	return m != standin.ModeNeverListen && m != standin.ModeExitAtStart
}

// bindBlocked is whether c, starting now, fails to bind: another running
// container holds an overlapping port and the two do not both share it.
func (k *Kubelet) bindBlocked(c *container) bool {
	mine, ok := listenerOf(c.argv)
	if !ok || !listens(c.mode) {
		return false
	}
	for _, p := range k.pods {
		for _, o := range p.containers {
			if o == c || o.proc == nil || o.bindFailed || !listens(o.mode) {
				continue
			}
			if theirs, ok := listenerOf(o.argv); ok && mine.overlaps(theirs) && !(mine.share && theirs.share) {
				return true
			}
		}
	}
	return false
}
