package versions

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// TestEtcdForm pins the per-minor forms: 3.5's experimental names and
// /health probes, 3.6 and 3.7's feature gate, plain names and /livez,
// /readyz, and that no form mixes the two (etcd 3.6 refuses that).
func TestEtcdForm(t *testing.T) {
	for _, tc := range []struct {
		v                      string
		flags                  []string
		live, ready, startPath string
	}{
		{"3.5.35", []string{"experimental-initial-corrupt-check=true", "experimental-watch-progress-notify-interval=5s"}, "/health?exclude=NOSPACE&serializable=true", "", "/health?serializable=false"},
		{"3.6.16", []string{"feature-gates=InitialCorruptCheck=true", "watch-progress-notify-interval=5s"}, "/livez", "/readyz", "/readyz"},
		{"3.7.3", []string{"feature-gates=InitialCorruptCheck=true", "watch-progress-notify-interval=5s"}, "/livez", "/readyz", "/readyz"},
	} {
		v := version.MustParseSemantic(tc.v)
		f := Etcd(v)
		if len(f.Flags) != len(tc.flags) {
			t.Errorf("etcd %s: flags %v, want %v", tc.v, f.Flags, tc.flags)
		}
		for _, kv := range tc.flags {
			k, val, _ := strings.Cut(kv, "=")
			if f.Flags[k] != val {
				t.Errorf("etcd %s: --%s=%q, want %q", tc.v, k, f.Flags[k], val)
			}
		}
		if f.Liveness != tc.live || f.Readiness != tc.ready || f.Startup != tc.startPath {
			t.Errorf("etcd %s: probes %q %q %q, want %q %q %q", tc.v, f.Liveness, f.Readiness, f.Startup, tc.live, tc.ready, tc.startPath)
		}
		if err := CheckArgs(nodestate.Etcd, v, f.Flags); err != nil {
			t.Errorf("etcd %s refuses its own form: %v", tc.v, err)
		}
	}
}

// TestCheckArgsEtcdBothForms pins etcd 3.6's refusal of an experimental
// flag beside its new name or feature gate.
func TestCheckArgsEtcdBothForms(t *testing.T) {
	v36 := version.MustParseSemantic("3.6.16")
	for _, tc := range []struct {
		args map[string]string
		want string // "" = accepted
	}{
		{map[string]string{"watch-progress-notify-interval": "5s"}, ""},
		{map[string]string{"watch-progress-notify-interval": "5s", "experimental-watch-progress-notify-interval": "5s"}, "--experimental-watch-progress-notify-interval: etcd 3.6.16 refuses it together with --watch-progress-notify-interval"},
		{map[string]string{"feature-gates": "StopGRPCServiceOnDefrag=true,InitialCorruptCheck=true", "experimental-initial-corrupt-check": "true"}, "together with its feature gate InitialCorruptCheck"},
		{map[string]string{"feature-gates": "StopGRPCServiceOnDefrag=true", "experimental-initial-corrupt-check": "true"}, ""},
	} {
		err := CheckArgs(nodestate.Etcd, v36, tc.args)
		if tc.want == "" {
			if err != nil && !strings.Contains(err.Error(), "has no such flag") {
				t.Errorf("CheckArgs(%v) = %v, want accepted", tc.args, err)
			}
			continue
		}
		var fe *FlagError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckArgs(%v) = %v, want a FlagError containing %q", tc.args, err, tc.want)
		}
	}
}

func TestKubeForm(t *testing.T) {
	for v, want := range map[string]bool{"1.34.4": true, "1.35.4": true, "1.36.0": false, "1.37.2": false} {
		if got := Kube(version.MustParseSemantic(v)).FlexVolumeDir; got != want {
			t.Errorf("Kube(%s).FlexVolumeDir = %v, want %v", v, got, want)
		}
	}
}
