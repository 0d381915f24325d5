package kubeletpod

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// base is a control-plane pod as kubeadm writes it: defaults left out.
const base = `apiVersion: v1
kind: Pod
metadata:
  creationTimestamp: null
  labels:
    component: kube-scheduler
    tier: control-plane
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --bind-address=127.0.0.1
    - --leader-elect=true
    image: registry.k8s.io/kube-scheduler:v1.37.2
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 8
      httpGet:
        host: 127.0.0.1
        path: /livez
        port: probe-port
        scheme: HTTPS
      initialDelaySeconds: 10
      periodSeconds: 10
      timeoutSeconds: 15
    name: kube-scheduler
    ports:
    - containerPort: 10259
      name: probe-port
      protocol: TCP
    resources:
      requests:
        cpu: 100m
    volumeMounts:
    - mountPath: /etc/kubernetes/scheduler.conf
      name: kubeconfig
      readOnly: true
  hostNetwork: true
  priority: 2000001000
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: /etc/kubernetes/scheduler.conf
      type: FileOrCreate
    name: kubeconfig
status: {}
`

func decode(t *testing.T, s string) *corev1.Pod {
	t.Helper()
	p, err := Decode([]byte(s))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return p
}

// edit returns base with old replaced by new, failing when old is absent
// (so a table row cannot silently test base against itself).
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(base, old) {
		t.Fatalf("base has no %q", old)
	}
	return strings.Replace(base, old, new, 1)
}

func TestSameAppliesKubeletsDefaults(t *testing.T) {
	same := []struct{ name, old, new string }{
		{"restart policy written out", "  hostNetwork: true\n", "  hostNetwork: true\n  restartPolicy: Always\n"},
		{"dns policy written out", "  hostNetwork: true\n", "  hostNetwork: true\n  dnsPolicy: ClusterFirst\n"},
		{"grace period written out", "  hostNetwork: true\n", "  hostNetwork: true\n  terminationGracePeriodSeconds: 30\n"},
		{"scheduler name written out", "  hostNetwork: true\n", "  hostNetwork: true\n  schedulerName: default-scheduler\n"},
		{"service links written out", "  hostNetwork: true\n", "  hostNetwork: true\n  enableServiceLinks: true\n"},
		{"pull policy left to the tag", "    imagePullPolicy: IfNotPresent\n", ""},
		{"termination message written out", "    name: kube-scheduler\n    ports:", "    name: kube-scheduler\n    terminationMessagePath: /dev/termination-log\n    terminationMessagePolicy: File\n    ports:"},
		{"port protocol left out", "      protocol: TCP\n", ""},
		{"host port written out (host network)", "      protocol: TCP\n", "      protocol: TCP\n      hostPort: 10259\n"},
		{"probe success threshold written out", "      timeoutSeconds: 15\n", "      timeoutSeconds: 15\n      successThreshold: 1\n"},
		{"creationTimestamp and status dropped", "  creationTimestamp: null\n", ""},
		{"key order", "    component: kube-scheduler\n    tier: control-plane\n", "    tier: control-plane\n    component: kube-scheduler\n"},
	}
	for _, tc := range same {
		t.Run(tc.name, func(t *testing.T) {
			b := edit(t, tc.old, tc.new)
			if !Same(decode(t, base), decode(t, b)) {
				t.Errorf("kubelet sees one pod, Same says two: %v", Diff(decode(t, base), decode(t, b)))
			}
			if d := Diff(decode(t, base), decode(t, b)); len(d) != 0 {
				t.Errorf("Diff = %v, want none", d)
			}
		})
	}
}

func TestDiffNamesWhatKubeletSees(t *testing.T) {
	cases := []struct{ name, old, new, want string }{
		{"flag value", "--leader-elect=true", "--leader-elect=false", "spec.containers[kube-scheduler].command: --leader-elect=true -> --leader-elect=false"},
		{"flag added", "    - --leader-elect=true\n", "    - --leader-elect=true\n    - --profiling=false\n", "spec.containers[kube-scheduler].command: --profiling=false added"},
		{"flag removed", "    - --bind-address=127.0.0.1\n", "", "spec.containers[kube-scheduler].command: --bind-address=127.0.0.1 removed"},
		{"flags reordered", "    - --bind-address=127.0.0.1\n    - --leader-elect=true\n", "    - --leader-elect=true\n    - --bind-address=127.0.0.1\n", "spec.containers[kube-scheduler].command: the same arguments in another order"},
		{"annotation added", "  labels:\n", "  annotations:\n    stratum.ciq.com/inputs-sha256: abc\n  labels:\n", `metadata.annotations: (absent) -> {"stratum.ciq.com/inputs-sha256":"abc"}`},
		{"probe port by number", "        port: probe-port\n", "        port: 10259\n", `spec.containers[kube-scheduler].livenessProbe.httpGet.port: "probe-port" -> 10259`},
		{"priority left out", "  priority: 2000001000\n", "", "spec.priority: 2000001000 -> (absent)"},
		{"mount by name", "      readOnly: true\n", "      readOnly: false\n", "spec.containers[kube-scheduler].volumeMounts[kubeconfig].readOnly: true -> (absent)"},
		{"pull policy against the default", "    imagePullPolicy: IfNotPresent\n", "    imagePullPolicy: Always\n", `spec.containers[kube-scheduler].imagePullPolicy: "IfNotPresent" -> "Always"`},
		{"quantity written another way", "        cpu: 100m\n", "        cpu: \"0.1\"\n", "a value is written differently"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := decode(t, base), decode(t, edit(t, tc.old, tc.new))
			if Same(a, b) {
				t.Fatalf("Same says one pod; kubelet sees two")
			}
			d := Diff(a, b)
			if len(d) != 1 || !strings.HasPrefix(d[0], tc.want) {
				t.Errorf("Diff = %q, want one line starting %q", d, tc.want)
			}
		})
	}
}

func TestImageTagDecidesThePullPolicy(t *testing.T) {
	for image, want := range map[string]string{
		"registry.k8s.io/etcd:3.6.16-0":             "3.6.16-0",
		"registry.k8s.io/etcd":                      "latest",
		"localhost:5000/etcd":                       "latest",
		"localhost:5000/etcd:v1":                    "v1",
		"registry.k8s.io/etcd@sha256:0123":          "",
		"registry.k8s.io/etcd:latest@sha256:0123":   "latest",
		"registry.k8s.io/etcd:3.6.16-0@sha256:0123": "3.6.16-0",
	} {
		if got := imageTag(image); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", image, got, want)
		}
	}
	// A :latest image defaults to Always, so an explicit IfNotPresent is a
	// different pod.
	a := decode(t, edit(t, "kube-scheduler:v1.37.2", "kube-scheduler:latest"))
	b := decode(t, strings.Replace(edit(t, "kube-scheduler:v1.37.2", "kube-scheduler:latest"), "    imagePullPolicy: IfNotPresent\n", "", 1))
	if Same(a, b) {
		t.Error(":latest without a pull policy is Always, not IfNotPresent")
	}
}

func TestDecodeRefusesWhatKubeletRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"empty":     "  \n",
		"not yaml":  "{",
		"not a pod": "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n",
		"no name":   "apiVersion: v1\nkind: Pod\nspec:\n  containers: []\n",
	} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// A list kubelet keeps in order is compared in order: the same volumes in
// another order are another pod.
func TestDiffReportsAReorderedList(t *testing.T) {
	extra := "  - hostPath:\n      path: /a\n    name: a\n"
	first := edit(t, "  volumes:\n", "  volumes:\n"+extra)
	last := strings.Replace(base, "status: {}\n", "", 1)
	last = strings.TrimSuffix(last, "\n") + "\n" + extra + "status: {}\n"
	a, b := decode(t, first), decode(t, last)
	if Same(a, b) {
		t.Fatal("Same says one pod for volumes in another order")
	}
	if d := Diff(a, b); len(d) != 1 || d[0] != "spec.volumes: the same entries in another order" {
		t.Errorf("Diff = %q", d)
	}
}
