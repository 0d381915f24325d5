package kubeletsim

import (
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestRuntimeEnvDefaults: the container runtime's additions to a
// container's environment (PATH, HOSTNAME, HOME), as containerd 1.6 and
// runc 1.1 make them under a real kubelet (e2e TestHostRunsStaticPod): each
// is added only when neither the image's ENV nor the pod's env sets it;
// HOSTNAME is the host's for a hostNetwork pod.
func TestRuntimeEnvDefaults(t *testing.T) {
	b := newBed(t, nil)
	m, err := LoadImageMap(b.images)
	if err != nil {
		t.Fatal(err)
	}
	home := m[imgRun]
	home.Env = map[string]string{helperEnv: "run", "KSIM_OUT": b.out, "HOME": "/from-image"}
	const imgHome = "registry.test/helper:home"
	m[imgHome] = home
	if err := m.Save(b.images); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	cases := []struct {
		name  string
		image string
		env   [][2]string
		want  map[string]string
	}{
		{"defaults", imgRun, nil, map[string]string{"PATH": DefaultPath, "HOSTNAME": host, "HOME": "/"}},
		{"overridden", imgHome, [][2]string{{"HOSTNAME", "from-pod"}, {"PATH", "/from-pod"}}, map[string]string{"PATH": "/from-pod", "HOSTNAME": "from-pod", "HOME": "/from-image"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := "kube-" + c.name
			b.write(name+".yaml", podYAML(podOpts{name: name, image: c.image, env: c.env}))
			p := b.waitRunning(key(name), nil)
			rec := b.record(p.PID)
			got := map[string][]string{}
			for _, kv := range rec.Env {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = append(got[k], v)
			}
			for k, v := range c.want {
				if !slices.Equal(got[k], []string{v}) {
					t.Errorf("%s = %q, want exactly %q (environment %q)", k, got[k], v, rec.Env)
				}
			}
		})
	}
}

// TestRuntimeHostname: without hostNetwork the runtime's HOSTNAME is the
// pod's spec.hostname, else its name (with the node suffix), at most 63
// bytes (kubelet's GeneratePodHostNameAndDomain).
func TestRuntimeHostname(t *testing.T) {
	long := strings.Repeat("k", 70)
	cases := []struct {
		pod  string
		want string
	}{
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: etcd}\nspec: {hostNetwork: true}\n", func() string { h, _ := os.Hostname(); return h }()},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: etcd}\nspec: {hostname: custom}\n", "custom"},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: etcd}\nspec: {}\n", "etcd-node1"},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: " + long + "}\nspec: {}\n", long[:63]},
	}
	for _, c := range cases {
		var pod corev1.Pod
		if err := yaml.Unmarshal([]byte(c.pod), &pod); err != nil {
			t.Fatal(err)
		}
		env := runtimeEnv(nil, &pod, node)
		if !slices.Contains(env, "HOSTNAME="+c.want) {
			t.Errorf("%s: environment %q, want HOSTNAME=%s", pod.Name, env, c.want)
		}
	}
}
