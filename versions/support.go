// Package versions knows which versions of the control-plane components
// stratum-upgrade supports, the flags each version accepts and renders, and
// which upgrades between them are allowed.
//
// It is the one place a new Kubernetes or etcd minor is added
// (docs/versions.md says how). It does no I/O: the flag tables are embedded.
package versions

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
	"github.com/ciq/stratum-upgrade/resolve"
)

// Minors supported, oldest first, as "major.minor".
var (
	// KubernetesMinors are the Kubernetes minors stratum renders
	// kube-apiserver, kube-controller-manager and kube-scheduler for.
	KubernetesMinors = []string{"1.34", "1.35", "1.36", "1.37"}
	// EtcdMinors are the etcd minors stratum renders etcd for.
	EtcdMinors = []string{"3.5", "3.6", "3.7"}
)

// ErrUnsupported is wrapped by every UnsupportedError.
var ErrUnsupported = errors.New("unsupported version")

// UnsupportedError is a component version outside the supported minors.
type UnsupportedError struct {
	Component string
	Version   *version.Version
	Supported []string // the supported minors of the component
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s %s is not supported: stratum-upgrade renders %s %s", e.Component, e.Version, e.Component, strings.Join(e.Supported, ", "))
}

// Unwrap makes errors.Is(err, ErrUnsupported) hold.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// MinorOf is v's "major.minor".
func MinorOf(v *version.Version) string { return fmt.Sprintf("%d.%d", v.Major(), v.Minor()) }

// minorsOf is the supported minors of component, nil for one rendered the
// same at every version (kube-vip) or unknown.
func minorsOf(component string) []string {
	switch component {
	case nodestate.Etcd:
		return EtcdMinors
	case nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler:
		return KubernetesMinors
	}
	return nil
}

// Supported returns nil when stratum renders component at v, else an
// *UnsupportedError. kube-vip is rendered the same at every version.
func Supported(component string, v *version.Version) error {
	minors := minorsOf(component)
	if minors == nil {
		return nil
	}
	m := MinorOf(v)
	for _, s := range minors {
		if s == m {
			return nil
		}
	}
	return &UnsupportedError{Component: component, Version: v, Supported: minors}
}

// Of is component's version on the resolved node n,
// checked against the supported minors. It is nil, with no error, for a
// kube-vip image whose tag is no version.
func Of(n *resolve.Node, component string) (*version.Version, error) {
	v, err := n.Version(component)
	if err != nil || v == nil {
		return v, err
	}
	if err := Supported(component, v); err != nil {
		return nil, err
	}
	return v, nil
}
