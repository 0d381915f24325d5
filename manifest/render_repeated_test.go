package manifest

import (
	"slices"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/nodestate"
)

// A flag given more than once is written once per value, in order, where
// extraArgsOrder places it, and replaces the rendered flag of that name:
// two --service-account-issuer (the first one issues, the other stays
// accepted while tokens rotate) both reach kube-apiserver. A list flag
// given twice reads the files of both values.
func TestRenderRepeatedFlag(t *testing.T) {
	const (
		newIssuer = "--service-account-issuer=https://issuer.example.com"
		oldIssuer = "--service-account-issuer=https://kubernetes.default.svc.cluster.local"
	)
	cases := []struct {
		name  string
		edit  func(st *nodestate.NodeState)
		tail  []string // the last flags of kube-apiserver's command line
		files []string // among its start-only inputs
	}{
		{"two issuers, the new one first", func(st *nodestate.NodeState) {
			st.SetExtraArg(nodestate.KubeAPIServer, "service-account-issuer", "https://issuer.example.com", "https://kubernetes.default.svc.cluster.local")
		}, []string{"--tls-private-key-file=/etc/kubernetes/pki/apiserver.key", newIssuer, oldIssuer}, nil},
		{"two issuers, the old one first", func(st *nodestate.NodeState) {
			st.SetExtraArg(nodestate.KubeAPIServer, "service-account-issuer", "https://kubernetes.default.svc.cluster.local", "https://issuer.example.com")
		}, []string{"--tls-private-key-file=/etc/kubernetes/pki/apiserver.key", oldIssuer, newIssuer}, nil},
		{"apart, as extraArgsOrder places them", func(st *nodestate.NodeState) {
			st.SetExtraArg(nodestate.KubeAPIServer, "service-account-issuer", "https://issuer.example.com", "https://kubernetes.default.svc.cluster.local")
			st.SetExtraArg(nodestate.KubeAPIServer, "profiling", "false")
			st.ExtraArgsOrder = map[string][]string{nodestate.KubeAPIServer: {"service-account-issuer", "profiling", "service-account-issuer"}}
		}, []string{newIssuer, "--profiling=false", oldIssuer}, nil},
		{"two service account keys", func(st *nodestate.NodeState) {
			st.SetExtraArg(nodestate.KubeAPIServer, "service-account-key-file", "/etc/kubernetes/pki/sa.pub", "/etc/kubernetes/pki/sa-old.pub")
		}, []string{"--service-account-key-file=/etc/kubernetes/pki/sa.pub", "--service-account-key-file=/etc/kubernetes/pki/sa-old.pub"},
			[]string{"/etc/kubernetes/pki/sa.pub", "/etc/kubernetes/pki/sa-old.pub"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := loadState(t, "default")
			tc.edit(st)
			if err := st.Validate(); err != nil {
				t.Fatal(err)
			}
			spec, err := SpecOf(renderPod(t, st, Profile{}, nodestate.KubeAPIServer, ""), nodestate.KubeAPIServer)
			if err != nil {
				t.Fatal(err)
			}
			argv := spec.Argv
			if len(argv) < len(tc.tail) || !slices.Equal(argv[len(argv)-len(tc.tail):], tc.tail) {
				t.Errorf("command line ends %q\nwant %q", argv[max(0, len(argv)-len(tc.tail)-1):], tc.tail)
			}
			name := flagNames(tc.tail[len(tc.tail)-1:])[0]
			if n := countOf(flagNames(argv), name); n != 2 {
				t.Errorf("%s is on the command line %d times, want 2 (the extra arg's values, not the rendered one)", name, n)
			}
			paths, err := InputPaths(st, nodestate.KubeAPIServer)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.files {
				if !slices.Contains(paths, f) {
					t.Errorf("start-only inputs %v lack %s", paths, f)
				}
			}
		})
	}
}

// etcd takes --feature-gates more than once and adds each value's gates to
// the others', so the check that etcd 3.6 refuses an --experimental-* flag
// beside its gate sees the gates of every value, not the last one's.
func TestRepeatedFeatureGatesChecked(t *testing.T) {
	for _, gates := range [][]string{
		{"InitialCorruptCheck=true", "StopGRPCServiceOnDefrag=true"},
		{"StopGRPCServiceOnDefrag=true", "InitialCorruptCheck=true"},
	} {
		st := loadState(t, "real") // etcd 3.6.16
		st.SetExtraArg(nodestate.Etcd, "experimental-initial-corrupt-check", "true")
		st.SetExtraArg(nodestate.Etcd, "feature-gates", gates...)
		_, err := Render(st, Profile{}, nodestate.Etcd, "")
		if err == nil || !strings.Contains(err.Error(), "together with its feature gate InitialCorruptCheck") {
			t.Errorf("--feature-gates %q with --experimental-initial-corrupt-check: %v, want it refused", gates, err)
		}
	}
}
