package adopt

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ciq/stratum-upgrade/kubeletpod"
	"github.com/ciq/stratum-upgrade/manifest"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// kubeadm v1beta4's extraArgs may give a flag more than once; kubeadm
// drops its own flag of that name and writes every value after its flags,
// in the configuration's order. Adoption keeps every value in that order
// (two --service-account-issuer: the first issues, the other is still
// accepted while tokens rotate), the render is the pod kubelet runs, so
// adopting restarts nothing, and the state written to the journal renders
// the same pod again.
func TestAdoptRepeatedFlag(t *testing.T) {
	const (
		issuer    = "    - --service-account-issuer=https://kubernetes.default.svc.cluster.local\n"
		keyFile   = "    - --service-account-key-file=/etc/kubernetes/pki/sa.pub\n"
		newIssuer = "https://issuer.example.com"
		oldIssuer = "https://kubernetes.default.svc.cluster.local"
	)
	arg := func(flag, value string) string { return "    - --" + flag + "=" + value + "\n" }
	cases := []struct {
		name    string
		fixture string // "" for defaults
		drop    string // kubeadm's own flag the extra args replace
		tail    string // kubeadm's extra args, after its flags
		flag    string
		values  nodestate.ArgValues
		order   []string
		profile bool   // --profiling=false is an extra arg too
		domain  string // networking.dnsDomain; "" for cluster.local
	}{
		{"the new issuer first", "", issuer, arg("service-account-issuer", newIssuer) + arg("service-account-issuer", oldIssuer),
			"service-account-issuer", nodestate.ArgValues{newIssuer, oldIssuer}, []string{"service-account-issuer"}, false, ""},
		{"the old issuer first", "", issuer, arg("service-account-issuer", oldIssuer) + arg("service-account-issuer", newIssuer),
			"service-account-issuer", nodestate.ArgValues{oldIssuer, newIssuer}, []string{"service-account-issuer"}, false, ""},
		{"the issuers apart", "", issuer, arg("service-account-issuer", newIssuer) + arg("profiling", "false") + arg("service-account-issuer", oldIssuer),
			"service-account-issuer", nodestate.ArgValues{newIssuer, oldIssuer}, []string{"service-account-issuer", "profiling", "service-account-issuer"}, true, ""},
		{"two service account keys", "", keyFile, arg("service-account-key-file", "/etc/kubernetes/pki/sa.pub") + arg("service-account-key-file", "/etc/kubernetes/pki/sa-old.pub"),
			"service-account-key-file", nodestate.ArgValues{"/etc/kubernetes/pki/sa.pub", "/etc/kubernetes/pki/sa-old.pub"}, []string{"service-account-key-file"}, false, ""},
		// The DNS domain comes from the issuer kubeadm derives from it,
		// wherever it is among the values.
		{"the cluster's issuer first, another domain", "custom-paths", "    - --service-account-issuer=https://kubernetes.default.svc.k8s.internal\n",
			arg("service-account-issuer", "https://kubernetes.default.svc.k8s.internal") + arg("service-account-issuer", newIssuer),
			"service-account-issuer", nodestate.ArgValues{"https://kubernetes.default.svc.k8s.internal", newIssuer}, []string{"service-account-issuer"}, false, "k8s.internal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fixture, pki, domain := "defaults", "/etc/kubernetes/pki", "cluster.local"
			if tc.fixture != "" {
				fixture, pki, domain = tc.fixture, "/srv/kubernetes/pki", tc.domain
			}
			dir, cfg := copyFixture(t, "v1.37.2", fixture)
			api := filepath.Join(dir, "kube-apiserver.yaml")
			last := "    - --tls-private-key-file=" + pki + "/apiserver.key\n"
			edit(t, api, tc.drop, "")
			edit(t, api, last, last+tc.tail)
			src, err := ReadKubeadm(dir, cfg)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Check(src)
			if err != nil {
				t.Fatal(err)
			}
			if r := p.Restarts(); len(r) != 0 {
				t.Errorf("adopting restarts %v: %s", r, strings.Join(p.Components[1].Why, "; "))
			}
			st := p.State
			if got := st.ExtraArgs[nodestate.KubeAPIServer][tc.flag]; !reflect.DeepEqual(got, tc.values) {
				t.Errorf("extraArgs.kube-apiserver.%s = %q, want %q", tc.flag, got, tc.values)
			}
			if got := st.ExtraArgsOrder[nodestate.KubeAPIServer]; !reflect.DeepEqual(got, tc.order) {
				t.Errorf("extraArgsOrder.kube-apiserver = %q, want %q", got, tc.order)
			}
			if st.Networking.DNSDomain != domain {
				t.Errorf("networking.dnsDomain = %s, want %s", st.Networking.DNSDomain, domain)
			}
			if _, ok := st.ExtraArgs[nodestate.KubeAPIServer]["profiling"]; ok != tc.profile {
				t.Errorf("extra args %v: profiling is one: %v, want %v", st.ExtraArgs, ok, tc.profile)
			}
			// What the journal stores renders the running pod again.
			b, err := st.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			stored, err := nodestate.Parse(b)
			if err != nil {
				t.Fatalf("the adopted state does not parse: %v\n%s", err, b)
			}
			prof, err := manifest.LoadProfile(stored)
			if err != nil {
				t.Fatal(err)
			}
			pod, err := manifest.Render(stored, prof, nodestate.KubeAPIServer, "")
			if err != nil {
				t.Fatal(err)
			}
			if !kubeletpod.Same(src.Pods[nodestate.KubeAPIServer], pod) {
				t.Errorf("the stored state renders another pod: %v", kubeletpod.Diff(src.Pods[nodestate.KubeAPIServer], pod))
			}
		})
	}
}
