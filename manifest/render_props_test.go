package manifest

import (
	"bytes"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ciq/stratum-upgrade/nodestate"
)

func renderPod(t *testing.T, st *nodestate.NodeState, prof Profile, name, restartedAt string) *corev1.Pod {
	t.Helper()
	pod, err := Render(st, prof, name, restartedAt)
	if err != nil {
		t.Fatalf("render %s: %v", name, err)
	}
	return pod
}

func encode(t *testing.T, pod *corev1.Pod) []byte {
	t.Helper()
	b, err := Encode(pod)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forEachPod runs f for every component of every testdata state.
func forEachPod(t *testing.T, f func(t *testing.T, st *nodestate.NodeState, prof Profile, name string)) {
	for _, state := range states {
		st := loadState(t, state)
		prof := testProfile(t, st)
		for _, name := range NamesFor(st) {
			t.Run(state+"/"+name, func(t *testing.T) { f(t, st, prof, name) })
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		a, err := RenderBytes(st, prof, name, "2026-01-02T03:04:05Z")
		if err != nil {
			t.Fatal(err)
		}
		// A deep copy of the state: nothing may depend on identity, and
		// rendering must not have modified st.
		b, err := RenderBytes(st.Clone(), Profile{AuditPolicy: bytes.Clone(prof.AuditPolicy), AdmissionConfig: bytes.Clone(prof.AdmissionConfig)}, name, "2026-01-02T03:04:05Z")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20 && bytes.Equal(a, b); i++ {
			b, _ = RenderBytes(st, prof, name, "2026-01-02T03:04:05Z")
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("two renders differ:\n%s\n---\n%s", a, b)
		}
	})
}

func TestDecodeRoundTrip(t *testing.T) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		b := encode(t, renderPod(t, st, prof, name, "x"))
		pod, err := DecodePod(b)
		if err != nil {
			t.Fatalf("decode own render: %v", err)
		}
		if again := encode(t, pod); !bytes.Equal(again, b) {
			t.Fatalf("Encode(DecodePod(b)) != b:\n%s\n---\n%s", again, b)
		}
		if pod.Name != name || pod.Spec.Containers[0].Name != name {
			t.Errorf("pod %q container %q, want both %q", pod.Name, pod.Spec.Containers[0].Name, name)
		}
	})
}

func TestDecodePodRejects(t *testing.T) {
	st := loadState(t, "default")
	good := string(encode(t, renderPod(t, st, Profile{}, nodestate.Scheduler, "")))
	cases := []struct{ name, doc, want string }{
		{"empty", "  \n", "empty"},
		{"not yaml", "{{{", "decode pod"},
		{"unknown field", strings.Replace(good, "hostNetwork: true", "hostNetwork: true\n  hostNetwerk: true", 1), "hostNetwerk"},
		{"unknown container field", strings.Replace(good, "    imagePullPolicy:", "    imagePull: x\n    imagePullPolicy:", 1), "imagePull"},
		{"wrong kind", strings.Replace(good, "kind: Pod", "kind: Deployment", 1), `kind "Deployment"`},
		{"wrong apiVersion", strings.Replace(good, "apiVersion: v1", "apiVersion: apps/v1", 1), `apiVersion "apps/v1"`},
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n", "no containers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.doc == good {
				t.Fatal("edit did not apply")
			}
			_, err := DecodePod([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("DecodePod error = %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestDecodePodAcceptsKubeadmOutput: kubeadm's manifests carry
// creationTimestamp: null and status: {}; a strict decode must take them.
func TestDecodePodAcceptsKubeadmOutput(t *testing.T) {
	st := loadState(t, "default")
	good := string(encode(t, renderPod(t, st, Profile{}, nodestate.Etcd, "")))
	doc := strings.Replace(good, "metadata:\n", "metadata:\n  creationTimestamp: null\n", 1)
	if doc == good || !strings.Contains(doc, "status: {}") {
		t.Fatal("edit did not apply")
	}
	pod, err := DecodePod([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encode(t, pod), []byte(good)) {
		t.Error("kubeadm-style manifest does not re-encode to the render")
	}
}

func TestNamesForIsFresh(t *testing.T) {
	st := loadState(t, "default-vip")
	want := slices.Clone(NamesFor(st))
	a := NamesFor(st)
	a = append(a, "extra")
	sort.Sort(sort.Reverse(sort.StringSlice(a)))
	b := NamesFor(st)
	b[0] = "clobbered"
	if got := NamesFor(st); !reflect.DeepEqual(got, want) {
		t.Fatalf("NamesFor after callers edited earlier results = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(Names, []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-vip"}) {
		t.Fatalf("Names was modified: %v", Names)
	}
}

func TestKubeVIPExactlyWithVIP(t *testing.T) {
	for _, state := range states {
		st := loadState(t, state)
		has := slices.Contains(NamesFor(st), nodestate.KubeVIP)
		if has != (st.VIP != nil) {
			t.Errorf("%s: kube-vip in roster = %v, VIP set = %v", state, has, st.VIP != nil)
		}
		_, err := Render(st, testProfile(t, st), nodestate.KubeVIP, "")
		if (err == nil) != (st.VIP != nil) {
			t.Errorf("%s: Render(kube-vip) error = %v with VIP set = %v", state, err, st.VIP != nil)
		}
		_, terr := Target(st, nodestate.KubeVIP)
		if (terr == nil) != (st.VIP != nil) {
			t.Errorf("%s: Target(kube-vip) error = %v with VIP set = %v", state, terr, st.VIP != nil)
		}
	}
}

func TestRenderErrors(t *testing.T) {
	cis := loadState(t, "cis")
	cisProf := testProfile(t, cis)
	// etcd unpinned at a minor kubeadm pairs no etcd with has no image.
	noImage := loadState(t, "default")
	delete(noImage.Images, nodestate.Etcd)
	noImage.KubernetesVersion = "v1.38.0"
	badPort := loadState(t, "default")
	badPort.Ports.Scheduler = badPort.Ports.APIServer
	cases := []struct {
		name      string
		st        *nodestate.NodeState
		prof      Profile
		component string
		want      []string
	}{
		{"unknown component", loadState(t, "default"), Profile{}, "kube-proxy", []string{`"kube-proxy" is not a component`, "etcd, kube-apiserver, kube-controller-manager, kube-scheduler"}},
		{"empty name", loadState(t, "default"), Profile{}, "", []string{`"" is not a component`}},
		{"kube-vip without vip", loadState(t, "default"), Profile{}, nodestate.KubeVIP, []string{"kube-vip is not in this node's roster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)", "vip"}},
		{"missing image", noImage, Profile{}, nodestate.Etcd, []string{"render etcd", "no image", "images.etcd"}},
		{"invalid state", badPort, Profile{}, nodestate.Etcd, []string{"render etcd", "ports.scheduler"}},
		{"cis without profile contents", cis, Profile{}, nodestate.KubeAPIServer, []string{"render kube-apiserver", "LoadProfile"}},
		{"cis with malformed admission", cis, Profile{AuditPolicy: cisProf.AuditPolicy, AdmissionConfig: []byte("kind: Pod\n")}, nodestate.KubeAPIServer, []string{"render kube-apiserver", cis.Profile.AdmissionConfigFile}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Render(c.st, c.prof, c.component, "")
			if err == nil {
				t.Fatal("Render succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// A cis state's other components do not need the profile's files.
	if _, err := Render(cis, Profile{}, nodestate.Scheduler, ""); err != nil {
		t.Errorf("cis scheduler without profile contents: %v", err)
	}
}

func TestRestartedAtChangesOnlyItsAnnotation(t *testing.T) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		plain := renderPod(t, st, prof, name, "")
		if _, ok := plain.Annotations[RestartedAtAnnotation]; ok || RestartedAt(plain) != "" {
			t.Fatalf("restartedAt \"\" rendered annotation %q", RestartedAt(plain))
		}
		stamped := renderPod(t, st, prof, name, "2026-03-04T05:06:07.123456789Z")
		if got := RestartedAt(stamped); got != "2026-03-04T05:06:07.123456789Z" {
			t.Fatalf("RestartedAt = %q", got)
		}
		if plain.Annotations == nil {
			plain.Annotations = map[string]string{}
		}
		plain.Annotations[RestartedAtAnnotation] = "2026-03-04T05:06:07.123456789Z"
		if a, b := encode(t, plain), encode(t, stamped); !bytes.Equal(a, b) {
			t.Fatalf("pods differ beyond the annotation:\n%s\n---\n%s", a, b)
		}
	})
}

// TestProfileHashAnnotations checks that each hash annotation follows its
// own file and nothing else does.
func TestProfileHashAnnotations(t *testing.T) {
	st := loadState(t, "cis")
	base := testProfile(t, st)
	changedAudit := Profile{AuditPolicy: append(bytes.Clone(base.AuditPolicy), "# one more comment\n"...), AdmissionConfig: base.AdmissionConfig}
	changedAdmission := Profile{AuditPolicy: base.AuditPolicy, AdmissionConfig: append(bytes.Clone(base.AdmissionConfig), "# one more comment\n"...)}
	cases := []struct {
		name                   string
		prof                   Profile
		auditMoves, admitMoves bool
	}{
		{"same files", Profile{AuditPolicy: bytes.Clone(base.AuditPolicy), AdmissionConfig: bytes.Clone(base.AdmissionConfig)}, false, false},
		{"audit policy changed", changedAudit, true, false},
		{"admission file changed", changedAdmission, false, true},
	}
	ref := renderPod(t, st, base, nodestate.KubeAPIServer, "")
	if len(ref.Annotations[AuditPolicyAnnotation]) != 64 || len(ref.Annotations[AdmissionConfigAnnotation]) != 64 {
		t.Fatalf("cis apiserver annotations: %v", ref.Annotations)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := renderPod(t, st, c.prof, nodestate.KubeAPIServer, "")
			if moved := pod.Annotations[AuditPolicyAnnotation] != ref.Annotations[AuditPolicyAnnotation]; moved != c.auditMoves {
				t.Errorf("audit annotation moved = %v, want %v", moved, c.auditMoves)
			}
			if moved := pod.Annotations[AdmissionConfigAnnotation] != ref.Annotations[AdmissionConfigAnnotation]; moved != c.admitMoves {
				t.Errorf("admission annotation moved = %v, want %v", moved, c.admitMoves)
			}
			// Beyond the two annotations the pod is the same.
			pod.Annotations[AuditPolicyAnnotation] = ref.Annotations[AuditPolicyAnnotation]
			pod.Annotations[AdmissionConfigAnnotation] = ref.Annotations[AdmissionConfigAnnotation]
			if !bytes.Equal(encode(t, pod), encode(t, ref)) {
				t.Error("the apiserver pod changed beyond the hash annotations")
			}
			// The other components do not carry the files at all.
			for _, name := range NamesFor(st) {
				if name == nodestate.KubeAPIServer {
					continue
				}
				a, b := encode(t, renderPod(t, st, base, name, "")), encode(t, renderPod(t, st, c.prof, name, ""))
				if !bytes.Equal(a, b) {
					t.Errorf("%s changed with the profile files", name)
				}
			}
		})
	}
	for _, state := range []string{"default", "default-vip"} {
		def := loadState(t, state)
		pod := renderPod(t, def, Profile{}, nodestate.KubeAPIServer, "")
		for _, k := range []string{AuditPolicyAnnotation, AdmissionConfigAnnotation} {
			if _, ok := pod.Annotations[k]; ok {
				t.Errorf("%s apiserver has %s", state, k)
			}
		}
	}
}

// TestMountPathsAreHostPaths checks the rule the kubelet stand-in depends
// on: every mount is at its host path, and every absolute path in argv is
// inside one, so argv is valid both in the container and on the host.
func TestMountPathsAreHostPaths(t *testing.T) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		pod := renderPod(t, st, prof, name, "")
		hostPath := map[string]string{}
		for _, v := range pod.Spec.Volumes {
			if v.HostPath == nil {
				t.Fatalf("volume %s is not a hostPath", v.Name)
			}
			hostPath[v.Name] = v.HostPath.Path
		}
		var mounts []string
		for _, m := range pod.Spec.Containers[0].VolumeMounts {
			if hostPath[m.Name] != m.MountPath {
				t.Errorf("mount %s at %s, host path %s", m.Name, m.MountPath, hostPath[m.Name])
			}
			mounts = append(mounts, m.MountPath)
		}
		spec, err := SpecOf(pod, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range spec.Argv[1:] {
			_, v, ok := strings.Cut(a, "=")
			if !ok || !strings.HasPrefix(v, "/") {
				continue
			}
			if !slices.ContainsFunc(mounts, func(m string) bool { return v == m || strings.HasPrefix(v, m+"/") }) {
				t.Errorf("argv %s names a path outside every mount %v", a, mounts)
			}
		}
	})
}

func noPodCIDR(st *nodestate.NodeState) *nodestate.NodeState {
	c := st.Clone()
	c.Networking.PodCIDR = nodestate.NoPodCIDR
	return c
}

func TestComponentFlags(t *testing.T) {
	cis := loadState(t, "cis")
	def := loadState(t, "default")
	vip := loadState(t, "default-vip")
	cases := []struct {
		st        *nodestate.NodeState
		name      string
		want, not []string
	}{
		{def, nodestate.Etcd, []string{"--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.11:2379", "--listen-peer-urls=https://10.0.0.11:2380", "--listen-metrics-urls=http://127.0.0.1:2381", "--initial-cluster-state=existing", "--name=cp-1", "--data-dir=/var/lib/etcd", "--client-cert-auth=true", "--peer-client-cert-auth=true"}, nil},
		{vip, nodestate.Etcd, []string{"--initial-cluster=cp-1=https://192.168.10.21:2380"}, []string{"--initial-cluster-state"}},
		{def, nodestate.KubeAPIServer, []string{"--secure-port=6443", "--enable-admission-plugins=NodeRestriction", "--etcd-servers=https://127.0.0.1:2379", "--service-cluster-ip-range=10.96.0.0/12"}, []string{"--profiling=false", "--audit-policy-file", "--admission-control-config-file", "--tls-cipher-suites"}},
		{cis, nodestate.KubeAPIServer, []string{"--audit-policy-file=/etc/stratum/profiles/audit-policy.yaml", "--audit-log-path=/var/log/kubernetes/audit/audit.log", "--audit-log-maxage=30", "--audit-log-maxbackup=10", "--audit-log-maxsize=100", "--enable-admission-plugins=NodeRestriction,EventRateLimit,PodSecurity", "--admission-control-config-file=/etc/kubernetes/stratum/admission-config.yaml", "--profiling=false", "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,", "--event-ttl=2h"}, nil},
		// kubeadm leaves a default port to the component.
		{def, nodestate.ControllerManager, []string{"--bind-address=127.0.0.1", "--cluster-cidr=10.244.0.0/16", "--allocate-node-cidrs=true", "--service-cluster-ip-range=10.96.0.0/12", "--kubeconfig=/etc/kubernetes/controller-manager.conf"}, []string{"--profiling", "--secure-port"}},
		{noPodCIDR(def), nodestate.ControllerManager, []string{"--bind-address=127.0.0.1"}, []string{"--cluster-cidr", "--allocate-node-cidrs", "--service-cluster-ip-range"}},
		{cis, nodestate.ControllerManager, []string{"--secure-port=10357", "--profiling=false", "--terminated-pod-gc-threshold=10"}, nil},
		{def, nodestate.Scheduler, []string{"--bind-address=127.0.0.1", "--kubeconfig=/etc/kubernetes/scheduler.conf"}, []string{"--profiling", "--secure-port"}},
		{cis, nodestate.Scheduler, []string{"--secure-port=10359", "--profiling=false"}, nil},
		{cis, nodestate.Etcd, []string{"--quota-backend-bytes=8589934592"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, err := SpecOf(renderPod(t, c.st, testProfile(t, c.st), c.name, ""), c.name)
			if err != nil {
				t.Fatal(err)
			}
			if spec.Argv[0] != binaryName(c.name) {
				t.Errorf("argv[0] = %q", spec.Argv[0])
			}
			// kubeadm's ArgumentsToCommand: the rendered flags sorted by
			// name, then the extra args in their order.
			flags := spec.Argv[1:]
			n := len(flags) - len(c.st.ExtraArgList(c.name))
			if !sort.StringsAreSorted(flagNames(flags[:n])) {
				t.Errorf("rendered flags are not sorted by name: %v", flags[:n])
			}
			for i, a := range c.st.ExtraArgList(c.name) {
				if want := "--" + a.Name + "=" + a.Value; flags[n+i] != want {
					t.Errorf("flag %d is %s, want extra arg %s", n+i, flags[n+i], want)
				}
			}
			for _, w := range c.want {
				if !slices.ContainsFunc(flags, func(f string) bool { return f == w || strings.HasSuffix(w, ",") && strings.HasPrefix(f, w) }) {
					t.Errorf("missing %s in %v", w, flags)
				}
			}
			for _, n := range c.not {
				if slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, n) }) {
					t.Errorf("unexpected %s in %v", n, flags)
				}
			}
		})
	}
}

func flagNames(flags []string) []string {
	out := make([]string, len(flags))
	for i, f := range flags {
		out[i], _, _ = strings.Cut(f, "=")
	}
	return out
}

func TestExtraArgsReplaceAndAdd(t *testing.T) {
	st := loadState(t, "default")
	st.ExtraArgs = map[string]map[string]nodestate.ArgValues{
		nodestate.Scheduler: {"secure-port": {"20259"}, "v": {"4"}, "bind-address": {"127.0.0.2"}},
	}
	pod := renderPod(t, st, Profile{}, nodestate.Scheduler, "")
	spec, _ := SpecOf(pod, "")
	names := flagNames(spec.Argv[1:])
	for _, want := range []string{"--secure-port=20259", "--v=4", "--bind-address=127.0.0.2"} {
		if !slices.Contains(spec.Argv, want) {
			t.Errorf("argv %v lacks %s", spec.Argv, want)
		}
	}
	if n := countOf(names, "--secure-port"); n != 1 {
		t.Errorf("--secure-port appears %d times", n)
	}
	// The probes and the Target follow the moved listener.
	ctr := pod.Spec.Containers[0]
	probe := ctr.StartupProbe.HTTPGet
	if port := probePort(t, ctr, probe); port != 20259 || probe.Host != "127.0.0.2" {
		t.Errorf("startup probe %s:%d, want 127.0.0.2:20259", probe.Host, port)
	}
	tg, err := Target(st, nodestate.Scheduler)
	if err != nil || tg.Health != "https://127.0.0.2:20259/livez" {
		t.Errorf("Target = %+v, %v", tg, err)
	}
}

// probePort is the port probe p of container c reaches: its number, or
// the container port it names (kubeadm names ProbePortName).
func probePort(t *testing.T, c corev1.Container, p *corev1.HTTPGetAction) int {
	t.Helper()
	if p.Port.Type == intstr.Int {
		return p.Port.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.Port.StrVal {
			return int(cp.ContainerPort)
		}
	}
	t.Fatalf("probe port %q names no container port (ports %v)", p.Port.StrVal, c.Ports)
	return 0
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestEtcdOnLoopbackListsEachURLOnce(t *testing.T) {
	st := loadState(t, "default-vip")
	st.AdvertiseAddress = "127.0.0.1"
	st.Etcd.InitialCluster = "cp-1=https://127.0.0.1:2380"
	spec, err := SpecOf(renderPod(t, st, Profile{}, nodestate.Etcd, ""), nodestate.Etcd)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spec.Argv, "--listen-client-urls=https://127.0.0.1:2379") {
		t.Errorf("argv %v", spec.Argv)
	}
}

func TestIPv6UsesIPv6Loopback(t *testing.T) {
	st := loadState(t, "default")
	st.AdvertiseAddress = "fd00::11"
	st.Etcd.InitialCluster = "cp-1=https://[fd00::11]:2380"
	pod := renderPod(t, st, Profile{}, nodestate.Etcd, "")
	spec, _ := SpecOf(pod, "")
	for _, want := range []string{"--listen-client-urls=https://[::1]:2379,https://[fd00::11]:2379", "--listen-metrics-urls=http://[::1]:2381"} {
		if !slices.Contains(spec.Argv, want) {
			t.Errorf("argv lacks %s: %v", want, spec.Argv)
		}
	}
	tg, _ := Target(st, nodestate.Etcd)
	if tg.Health != "http://[::1]:2381/health?serializable=false" {
		t.Errorf("etcd health = %s", tg.Health)
	}
}

func TestTarget(t *testing.T) {
	cis := loadState(t, "cis")
	cases := []struct{ name, binary, health string }{
		{nodestate.Etcd, "etcd", "http://127.0.0.1:2381/health?serializable=false"},
		{nodestate.KubeAPIServer, "kube-apiserver", "https://127.0.0.1:6443/livez"},
		{nodestate.ControllerManager, "kube-controller-manager", "https://127.0.0.1:10357/healthz"},
		{nodestate.Scheduler, "kube-scheduler", "https://127.0.0.1:10359/livez"},
		{nodestate.KubeVIP, "kube-vip", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg, err := Target(cis, c.name)
			if err != nil {
				t.Fatal(err)
			}
			if tg.Name != c.name || tg.Binary != c.binary || tg.Health != c.health {
				t.Errorf("Target = %+v, want binary %s health %s", tg, c.binary, c.health)
			}
			// The Target agrees with the manifest: argv[0] and the startup probe.
			pod := renderPod(t, cis, testProfile(t, cis), c.name, "")
			ctr := pod.Spec.Containers[0]
			if filepath.Base(ctr.Command[0]) != tg.Binary {
				t.Errorf("argv[0] %s, Target binary %s", ctr.Command[0], tg.Binary)
			}
			if ctr.StartupProbe == nil {
				if tg.Health != "" || ctr.LivenessProbe != nil || ctr.ReadinessProbe != nil {
					t.Errorf("no startup probe but health %q / other probes", tg.Health)
				}
				return
			}
			// kubeadm probes the apiserver at the advertise address;
			// stratum dials loopback, where it listens too.
			g := ctr.StartupProbe.HTTPGet
			host := g.Host
			if c.name == nodestate.KubeAPIServer && host == cis.AdvertiseAddress {
				host = "127.0.0.1"
			}
			if got := strings.ToLower(string(g.Scheme)) + "://" + host + ":" + strconv.Itoa(probePort(t, ctr, g)) + g.Path; got != tg.Health {
				t.Errorf("startup probe %s, Target health %s", got, tg.Health)
			}
		})
	}
	if _, err := Target(cis, "kube-proxy"); err == nil || !strings.Contains(err.Error(), "kube-proxy") {
		t.Errorf("Target(kube-proxy) error = %v", err)
	}
}

func TestProbesAreKubeadms(t *testing.T) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		c := renderPod(t, st, prof, name, "").Spec.Containers[0]
		if name == nodestate.KubeVIP {
			if c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil {
				t.Fatal("kube-vip has no listener and must have no probes")
			}
			return
		}
		check := func(kind string, p *corev1.Probe, delay, period, failures int32) {
			if p == nil {
				t.Errorf("no %s probe", kind)
				return
			}
			if p.InitialDelaySeconds != delay || p.PeriodSeconds != period || p.FailureThreshold != failures || p.TimeoutSeconds != 15 {
				t.Errorf("%s probe timings %d/%d/%d/%d", kind, p.InitialDelaySeconds, p.PeriodSeconds, p.FailureThreshold, p.TimeoutSeconds)
			}
			// kubeadm's GetAPIServerProbeAddress: the advertise address;
			// every other component's probes go to loopback.
			want := "127.0.0.1"
			if name == nodestate.KubeAPIServer {
				want = st.AdvertiseAddress
			}
			if h := p.HTTPGet.Host; h != want {
				t.Errorf("%s probe goes to %s, not %s", kind, h, want)
			}
			if p.HTTPGet.Port.StrVal != ProbePortName || len(c.Ports) != 1 || c.Ports[0].Name != ProbePortName {
				t.Errorf("%s probe port %v, container ports %v: want the named port %s", kind, p.HTTPGet.Port, c.Ports, ProbePortName)
			}
		}
		check("liveness", c.LivenessProbe, 10, 10, 8)
		check("startup", c.StartupProbe, 10, 10, 24)
		switch name {
		case nodestate.KubeAPIServer, nodestate.Scheduler:
			check("readiness", c.ReadinessProbe, 0, 1, 3)
		case nodestate.ControllerManager:
			if c.ReadinessProbe != nil {
				t.Error("kubeadm gives kube-controller-manager no readiness probe")
			}
		}
	})
}

func TestSpecOf(t *testing.T) {
	st := loadState(t, "default-vip")
	vip := renderPod(t, st, Profile{}, nodestate.KubeVIP, "")
	spec, err := SpecOf(vip, nodestate.KubeVIP)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spec.Command, []string{"/kube-vip"}) {
		t.Errorf("Command = %v", spec.Command)
	}
	if !reflect.DeepEqual(spec.Argv, []string{"/kube-vip", "manager", "--k8sConfigPath=/etc/kubernetes/admin.conf", "--prometheusHTTPServer="}) {
		t.Errorf("Argv = %v", spec.Argv)
	}
	for k, v := range map[string]string{"vip_arp": "true", "port": "6443", "vip_interface": "eth0", "address": "192.168.10.20", "cp_enable": "true", "vip_leaderelection": "true", "vip_nodename": "cp-1"} {
		if spec.Env[k] != v {
			t.Errorf("Env[%s] = %q, want %q", k, spec.Env[k], v)
		}
	}
	if v, ok := spec.Env["prometheus_server"]; !ok || v != "" {
		t.Errorf("prometheus_server = %q, %v; want set and empty", v, ok)
	}
	// The spec is a copy: editing it leaves the pod alone.
	spec.Argv[0] = "changed"
	spec.Command[0] = "changed"
	if vip.Spec.Containers[0].Command[0] != "/kube-vip" {
		t.Error("SpecOf aliases the pod's command")
	}

	etcd := renderPod(t, st, Profile{}, nodestate.Etcd, "")
	es, _ := SpecOf(etcd, nodestate.Etcd)
	if len(es.Env) != 0 || es.Argv[0] != "etcd" || !reflect.DeepEqual(es.Argv, es.Command) {
		t.Errorf("etcd spec %+v", es)
	}

	// An unknown container name falls back to the first container.
	two := etcd.DeepCopy()
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "sidecar", Args: []string{"sleep"}, Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "2"}}})
	if s, _ := SpecOf(two, "nope"); s.Argv[0] != "etcd" {
		t.Errorf("fallback picked %v", s.Argv)
	}
	if s, _ := SpecOf(two, "sidecar"); !reflect.DeepEqual(s.Argv, []string{"sleep"}) || s.Command != nil || s.Env["A"] != "2" {
		t.Errorf("sidecar spec %+v", s)
	}
	if _, err := SpecOf(&corev1.Pod{}, "x"); err == nil {
		t.Error("SpecOf of a pod without containers succeeded")
	}
}

func TestPodShape(t *testing.T) {
	forEachPod(t, func(t *testing.T, st *nodestate.NodeState, prof Profile, name string) {
		if _, ok := st.Resources[name]; ok || st.Patches != nil {
			t.Skip("resources and patches change kubeadm's shape on purpose (TestRenderResources, TestRenderPatches)")
		}
		pod := renderPod(t, st, prof, name, "")
		s := pod.Spec
		c := s.Containers[0]
		switch {
		case pod.Namespace != "kube-system", pod.Labels["component"] != name, pod.Labels["tier"] != "control-plane":
			t.Errorf("metadata %+v", pod.ObjectMeta)
		case !s.HostNetwork, s.PriorityClassName != "system-node-critical", s.Priority == nil || *s.Priority != 2000001000:
			t.Errorf("hostNetwork %v priorityClass %q priority %v", s.HostNetwork, s.PriorityClassName, s.Priority)
		// Left to API defaulting, as kubeadm leaves them.
		case s.RestartPolicy != "", s.DNSPolicy != "", s.TerminationGracePeriodSeconds != nil:
			t.Errorf("restart %q dns %q grace %v written out; kubeadm leaves them to defaulting", s.RestartPolicy, s.DNSPolicy, s.TerminationGracePeriodSeconds)
		case s.SecurityContext == nil || s.SecurityContext.SeccompProfile == nil || s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("seccomp %+v", s.SecurityContext)
		case c.Image != st.Images[name], c.ImagePullPolicy != corev1.PullIfNotPresent:
			t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
		case len(c.Command) == 0:
			t.Error("no explicit command")
		}
		wantCPU := map[string]string{"etcd": "100m", "kube-apiserver": "250m", "kube-controller-manager": "200m", "kube-scheduler": "100m"}[name]
		if got := c.Resources.Requests.Cpu(); wantCPU != "" && got.String() != wantCPU {
			t.Errorf("cpu request %s, want %s", got, wantCPU)
		}
	})
}

func TestTestdataStatesRoundTrip(t *testing.T) {
	for _, state := range states {
		st := loadState(t, state)
		b, err := st.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := nodestate.Parse(b)
		if err != nil {
			t.Fatalf("%s: Parse(Marshal) = %v", state, err)
		}
		if !reflect.DeepEqual(st, again) {
			t.Errorf("%s: state changed across Marshal/Parse", state)
		}
	}
	// One state pins an image by digest, as production states do.
	st := loadState(t, "default-vip")
	if !strings.Contains(st.Images[nodestate.Etcd], "@sha256:") {
		t.Error("default-vip no longer pins etcd by digest")
	}
}

// A stopped component stays in the node state's roster (nodestate.Roster:
// it keeps its image) but leaves the rendered one: NamesFor omits it,
// Render and Target refuse it saying it is stopped, and WriteAll's set has
// no manifest of it.
func TestStoppedLeavesTheRoster(t *testing.T) {
	st := loadState(t, "default-vip")
	st.Stopped = []string{nodestate.Scheduler, nodestate.KubeVIP}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{nodestate.Etcd, nodestate.KubeAPIServer, nodestate.ControllerManager}
	if got := NamesFor(st); !slices.Equal(got, want) {
		t.Fatalf("NamesFor = %v, want %v", got, want)
	}
	if !slices.Contains(st.Roster(), nodestate.Scheduler) {
		t.Fatalf("Roster() = %v: a stopped component keeps its place there", st.Roster())
	}
	if _, err := Render(st, testProfile(t, st), nodestate.Scheduler, ""); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("Render of a stopped scheduler: %v, want an error saying it is stopped", err)
	}
	if _, err := Target(st, nodestate.Scheduler); err == nil {
		t.Fatal("Target of a stopped scheduler: no error")
	}
}
