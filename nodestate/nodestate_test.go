package nodestate

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const valid = `apiVersion: stratum.ciq.com/v1
kind: NodeState
nodeName: cp-1
advertiseAddress: 10.0.0.11
kubernetesVersion: v1.34.4
images:
  etcd: registry.k8s.io/etcd:3.5.35-0
  kube-apiserver: registry.k8s.io/kube-apiserver:v1.34.4
  kube-controller-manager: registry.k8s.io/kube-controller-manager:v1.34.4
  kube-scheduler: registry.k8s.io/kube-scheduler@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
etcd:
  dataDir: /var/lib/etcd
`

func TestParseDefaults(t *testing.T) {
	st, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if st.Etcd.MemberName != "cp-1" || st.Etcd.InitialCluster != "cp-1=https://10.0.0.11:2380" || st.Etcd.InitialClusterState != "new" {
		t.Errorf("etcd defaults: %+v", st.Etcd)
	}
	if st.Ports.APIServer != 6443 || st.Ports.EtcdMetrics != 2381 || st.PKIDir != DefaultPKIDir || st.Profile.Name != ProfileDefault {
		t.Errorf("defaults not applied: %+v %+v", st.Ports, st.Profile)
	}
	if got := st.Roster(); !reflect.DeepEqual(got, []string{Etcd, KubeAPIServer, ControllerManager, Scheduler}) {
		t.Errorf("roster without VIP = %v", got)
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, edit, want string
	}{
		{"unknown top-level field", valid + "colour: blue\n", `unknown field "colour"`},
		{"unknown nested field", strings.Replace(valid, "  dataDir:", "  datadir2: x\n  dataDir:", 1), `unknown field "etcd.datadir2"`},
		{"wrong type", strings.Replace(valid, "etcd:\n  dataDir: /var/lib/etcd", "etcd:\n  dataDir: [1]", 1), "etcd.dataDir"},
		{"wrong port type", valid + "ports:\n  apiServer: high\n", "ports.apiServer"},
		{"bad version", strings.Replace(valid, "v1.34.4\nimages", "1.34\nimages", 1), "kubernetesVersion"},
		{"missing kube-vip image", valid + "vip:\n  address: 10.0.0.100\n  interface: eth0\n", "images.kube-vip: required"},
		{"kube-vip image without vip", strings.Replace(valid, "images:\n", "images:\n  kube-vip: ghcr.io/kube-vip/kube-vip:v0.8.9\n", 1), "images.kube-vip"},
		{"relative data dir", strings.Replace(valid, "/var/lib/etcd", "var/lib/etcd", 1), "etcd.dataDir"},
		{"cis without files", valid + "profile:\n  name: cis\n", "profile.auditPolicyFile: required"},
		{"unknown profile", valid + "profile:\n  name: strict\n", "profile.name"},
		{"bad vip", valid + "vip:\n  address: nope\n  interface: eth0\n", "vip.address"},
		{"duplicate port", valid + "ports:\n  scheduler: 6443\n", "ports.scheduler: port 6443 is already used by ports.apiServer"},
		{"extra args for unknown", valid + "extraArgs:\n  kube-proxy:\n    v: \"2\"\n", "extraArgs.kube-proxy"},
		{"extra arg moving etcd's data dir", valid + "extraArgs:\n  etcd:\n    data-dir: /mnt/etcd\n", "extraArgs.etcd.data-dir: set by the node state's etcd.dataDir"},
		{"initial cluster without this member", strings.Replace(valid, "  dataDir: /var/lib/etcd", "  dataDir: /var/lib/etcd\n  initialCluster: cp-2=https://10.0.0.12:2380", 1), `etcd.initialCluster: does not list this member "cp-1"`},
		{"etcd grace 0", strings.Replace(valid, "  dataDir: /var/lib/etcd", "  dataDir: /var/lib/etcd\n  terminationGracePeriodSeconds: 0", 1), "etcd.terminationGracePeriodSeconds: must be between 1 and 300"},
		{"etcd grace too long", strings.Replace(valid, "  dataDir: /var/lib/etcd", "  dataDir: /var/lib/etcd\n  terminationGracePeriodSeconds: 301", 1), "etcd.terminationGracePeriodSeconds: must be between 1 and 300"},
		{"wrong kind", strings.Replace(valid, "kind: NodeState", "kind: Pod", 1), "kind: must be"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.edit))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", c.edit)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestUnknownComponentImage(t *testing.T) {
	doc := strings.Replace(valid, "images:\n", "images:\n  kube-proxy: registry.k8s.io/kube-proxy:v1.34.4\n", 1)
	_, err := Parse([]byte(doc))
	var ve ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), `images.kube-proxy: unknown component "kube-proxy"`) {
		t.Fatalf("want a ValidationError naming images.kube-proxy, got %v", err)
	}
}

func TestValidationListsEveryField(t *testing.T) {
	doc := strings.NewReplacer("cp-1\n", "CP_1\n", "10.0.0.11", "ten").Replace(valid)
	_, err := Parse([]byte(doc))
	var ve ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want ValidationError, got %v", err)
	}
	fields := map[string]bool{}
	for _, fe := range ve {
		fields[fe.Field] = true
	}
	for _, f := range []string{"nodeName", "advertiseAddress"} {
		if !fields[f] {
			t.Errorf("%s not reported in %v", f, err)
		}
	}
}

func TestLoadNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(p, []byte(valid+"bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("error should name file and field: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link.yaml")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlink should be refused: %v", err)
	}
}

func TestSaveRoundTripAndAtomic(t *testing.T) {
	_, err := Parse([]byte(valid + "vip:\n  address: 10.0.0.100\n  interface: eth0\n"))
	if err == nil {
		t.Fatal("kube-vip image missing should fail")
	}
	st, err := Parse([]byte(strings.Replace(valid, "images:\n", "images:\n  kube-vip: ghcr.io/kube-vip/kube-vip:v0.8.9\n", 1) + "vip:\n  address: 10.0.0.100\n  interface: eth0\n"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "state.yaml")
	if err := st.Save(p); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved state mode: %v %v", fi, err)
	}
	back, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, st) {
		t.Fatalf("round trip differs:\n%+v\n%+v", back, st)
	}
	if !reflect.DeepEqual(st.Clone(), st) {
		t.Fatal("Clone differs")
	}
	// An invalid state is refused and the file keeps its old content.
	before, _ := os.ReadFile(p)
	bad := st.Clone()
	bad.NodeName = "Not Valid"
	if err := bad.Save(p); err == nil {
		t.Fatal("invalid state saved")
	}
	after, _ := os.ReadFile(p)
	if string(before) != string(after) {
		t.Fatal("failed Save changed the file")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("staging files left: %v", entries)
	}
}

// TestParseKubernetesVersion lists the accepted and refused forms of
// kubernetesVersion. The "was" column notes the forms the previous
// regexp (^v[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$) classified the
// other way: semver's rules now decide them.
func TestParseKubernetesVersion(t *testing.T) {
	cases := []struct {
		in  string
		ok  bool
		was string
	}{
		{"v1.34.4", true, ""},
		{"v0.0.0", true, ""},
		{"v1.35.0-rc.1", true, ""},
		{"v1.35.0-alpha.0", true, ""},
		{"v1.34.4+k3s1", true, ""},
		{"v1.34.4-eks-1-34", true, ""},
		{"v1.34.4--", true, ""},
		{"v1.35.0-rc.1+build.5", true, "refused: '+' after a pre-release"},

		{"1.34.4", false, ""}, // the v is required
		{"V1.34.4", false, ""},
		{"v1.34", false, ""},
		{"1.34", false, ""},
		{"v1", false, ""},
		{"v1.34.4.1", false, ""},
		{"v1.34.x", false, ""},
		{"", false, ""},
		{"v", false, ""},
		{" v1.34.4", false, ""},
		{"v1.34.4 ", false, ""},
		{"v1.34.4\n", false, ""},
		{"v1.34.4-", false, ""},
		{"v1.34.4+", false, ""},
		{"v1.34.4_1", false, ""},
		{"vv1.34.4", false, ""},
		{"v01.34.4", false, "accepted: leading zero"},
		{"v1.034.4", false, "accepted: leading zero"},
		{"v1.34.04", false, "accepted: leading zero"},
		{"v1.34.4-rc.01", false, "accepted: leading zero in a numeric pre-release"},
		{"v1.34.4-rc..1", false, "accepted: empty pre-release identifier"},
		{"v1.34.4+.", false, "accepted: empty build identifier"},
		{"v1.34.99999999999999999999", false, "accepted: overflows"},
	}
	for _, c := range cases {
		v, err := ParseKubernetesVersion(c.in)
		if (err == nil) != c.ok {
			t.Errorf("ParseKubernetesVersion(%q) = %v, %v; want ok=%v", c.in, v, err, c.ok)
		}
		// Validate uses the same parser, with its own wording.
		st, perr := Parse([]byte(valid))
		if perr != nil {
			t.Fatal(perr)
		}
		st.KubernetesVersion = c.in
		verr := st.Validate()
		if c.ok && verr != nil {
			t.Errorf("kubernetesVersion %q: %v", c.in, verr)
		}
		if !c.ok && (verr == nil || !strings.Contains(verr.Error(), "kubernetesVersion: must look like v1.34.4")) {
			t.Errorf("kubernetesVersion %q: Validate = %v", c.in, verr)
		}
	}
}

// stopped must name components of the roster, each once.
func TestValidateStopped(t *testing.T) {
	for _, tc := range []struct {
		stopped []string
		field   string // "" when valid
	}{
		{nil, ""},
		{[]string{KubeAPIServer, Scheduler}, ""},
		{[]string{"kube-proxy"}, "stopped[0]"},
		{[]string{KubeVIP}, "stopped[0]"}, // no vip on this node
		{[]string{Scheduler, Scheduler}, "stopped[1]"},
	} {
		st, err := Load("../testdata/states/default.yaml")
		if err != nil {
			t.Fatal(err)
		}
		st.Stopped = tc.stopped
		err = st.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%v: %v", tc.stopped, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field+":")):
			t.Errorf("%v: %v, want an error naming %s", tc.stopped, err, tc.field)
		}
	}
}

// The fields init --from-kubeadm fills: each refused with its path when
// wrong, and each accepted in the form adoption writes.
func TestValidateAdoptionFields(t *testing.T) {
	const extra = "extraArgs:\n  kube-apiserver:\n    profiling: \"false\"\n    event-ttl: 2h\n"
	digest := strings.Repeat("ab", 32)
	good := []string{
		valid + extra + "extraArgsOrder:\n  kube-apiserver: [profiling, event-ttl]\n",
		valid + "caCertDirs: [/etc/pki/ca-trust, /etc/pki/tls/certs]\n",
		valid + "networking:\n  podCIDR: none\n  dnsDomain: k8s.internal\n",
		valid + "adoptedInputs:\n  etcd: " + digest + "\n",
	}
	for _, in := range good {
		if _, err := Parse([]byte(in)); err != nil {
			t.Errorf("refused: %v\n%s", err, in)
		}
	}
	bad := []struct{ name, in, want string }{
		{"order names no extra arg", valid + extra + "extraArgsOrder:\n  kube-apiserver: [v]\n", `extraArgsOrder.kube-apiserver[0]: "v" is not an extra arg`},
		{"order twice", valid + extra + "extraArgsOrder:\n  kube-apiserver: [profiling, profiling]\n", `extraArgsOrder.kube-apiserver[1]: "profiling" is listed 2 times; it has 1 value`},
		{"ca dir relative", valid + "caCertDirs: [etc/pki]\n", "caCertDirs[0]: must be an absolute, clean path"},
		{"ca dir ssl certs", valid + "caCertDirs: [/etc/ssl/certs]\n", "caCertDirs[0]: /etc/ssl/certs is always mounted"},
		{"ca dir twice", valid + "caCertDirs: [/etc/pki, /etc/pki]\n", "caCertDirs[1]: /etc/pki is listed twice"},
		{"ca dir takes a volume name", valid + "caCertDirs: [/k8s-certs]\n", `caCertDirs[0]: /k8s-certs would be mounted as volume "k8s-certs"`},
		{"pod cidr word", valid + "networking:\n  podCIDR: nothing\n", `networking.podCIDR: must be a CIDR, a dual-stack pair or "none"`},
		{"dns domain", valid + "networking:\n  dnsDomain: Cluster_Local\n", "networking.dnsDomain"},
		{"adopted digest", valid + "adoptedInputs:\n  etcd: abc\n", "adoptedInputs.etcd: must be a sha256 digest"},
		{"adopted unknown component", valid + "adoptedInputs:\n  kube-vip: " + digest + "\n", "adoptedInputs.kube-vip: not a component this node runs"},
	}
	for _, c := range bad {
		if _, err := Parse([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	st, _ := Parse([]byte(valid + extra + "extraArgsOrder:\n  kube-apiserver: [profiling]\n"))
	if got := st.ExtraArgList(KubeAPIServer); !reflect.DeepEqual(got, []Arg{{"profiling", "false"}, {"event-ttl", "2h"}}) {
		t.Errorf("ExtraArgList = %v: want the listed one, then the rest by name", got)
	}
	if got := st.CACertMountDirs(); !reflect.DeepEqual(got, DefaultCACertDirs) {
		t.Errorf("CACertMountDirs without caCertDirs = %v", got)
	}
}
