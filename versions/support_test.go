package versions

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

func TestSupported(t *testing.T) {
	for _, tc := range []struct {
		component, v string
		ok           bool
	}{
		{nodestate.Etcd, "3.5.35", true},
		{nodestate.Etcd, "3.7.3", true},
		{nodestate.Etcd, "3.4.30", false},
		{nodestate.Etcd, "3.8.0", false},
		{nodestate.KubeAPIServer, "1.34.4", true},
		{nodestate.Scheduler, "1.37.2", true},
		{nodestate.ControllerManager, "1.33.9", false},
		{nodestate.KubeAPIServer, "1.38.0-beta.0", false},
		{nodestate.KubeVIP, "0.9.2", true},
	} {
		err := Supported(tc.component, version.MustParseSemantic(tc.v))
		if (err == nil) != tc.ok {
			t.Errorf("Supported(%s, %s) = %v, want ok=%v", tc.component, tc.v, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrUnsupported) {
			t.Errorf("Supported(%s, %s) = %v, not ErrUnsupported", tc.component, tc.v, err)
		}
	}
}
