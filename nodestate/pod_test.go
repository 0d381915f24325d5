package nodestate

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const podFields = `extraVolumes:
  kube-apiserver:
  - name: audit-log
    hostPath: /var/log/kubernetes/audit
    mountPath: /var/log/kubernetes/audit
    pathType: DirectoryOrCreate
  - name: audit-policy
    hostPath: /etc/kubernetes/audit-policy.yaml
    mountPath: /etc/kubernetes/audit-policy.yaml
    readOnly: true
    pathType: File
extraEnvs:
  kube-controller-manager:
  - name: HTTPS_PROXY
    value: http://proxy.example:3128
  - name: HOST_IP
    valueFrom:
      fieldRef:
        fieldPath: status.hostIP
resources:
  kube-apiserver:
    requests:
      cpu: 500m
      memory: 1Gi
    limits:
      memory: 4Gi
patches:
  files:
  - name: kube-apiserver+strategic.yaml
    content: |
      spec:
        containers:
        - name: kube-apiserver
          resources:
            limits:
              cpu: "2"
  - name: kube-scheduler0+json.yaml
    content: |
      - op: add
        path: /metadata/labels/team
        value: infra
`

func TestValidatePodFields(t *testing.T) {
	st, err := Parse([]byte(valid + podFields))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.ExtraVolumes[KubeAPIServer]) != 2 || st.ExtraEnvs[ControllerManager][1].ValueFrom.FieldRef.FieldPath != "status.hostIP" ||
		st.Resources[KubeAPIServer].Limits["memory"] != "4Gi" || len(st.Patches.Files) != 2 {
		t.Errorf("decoded: %+v", st)
	}
	vol := "extraVolumes:\n  kube-apiserver:\n  - name: %s\n    hostPath: %s\n    mountPath: %s\n    pathType: %s\n"
	bad := []struct{ name, in, want string }{
		{"volume of unknown component", valid + "extraVolumes:\n  kube-proxy: []\n", "extraVolumes.kube-proxy: not a component"},
		{"volume name", valid + strings.NewReplacer("%s", "Bad_Name").Replace(vol), "extraVolumes.kube-apiserver[0].name"},
		{"host path relative", valid + "extraVolumes:\n  kube-apiserver:\n  - {name: a, hostPath: var/log, mountPath: /a}\n", "extraVolumes.kube-apiserver[0].hostPath: must be an absolute path"},
		{"mount path backstep", valid + "extraVolumes:\n  kube-apiserver:\n  - {name: a, hostPath: /a, mountPath: /a/../etc}\n", "extraVolumes.kube-apiserver[0].mountPath"},
		{"path type", valid + "extraVolumes:\n  kube-apiserver:\n  - {name: a, hostPath: /a, mountPath: /a, pathType: Dir}\n", "extraVolumes.kube-apiserver[0].pathType"},
		{"volume twice", valid + "extraVolumes:\n  etcd:\n  - {name: a, hostPath: /a, mountPath: /a}\n  - {name: a, hostPath: /b, mountPath: /b}\n", "extraVolumes.etcd[1].name: a is named twice"},
		{"mount path twice", valid + "extraVolumes:\n  etcd:\n  - {name: a, hostPath: /a, mountPath: /a}\n  - {name: b, hostPath: /b, mountPath: /a}\n", "extraVolumes.etcd[1].mountPath: /a is mounted twice"},
		{"env name", valid + "extraEnvs:\n  etcd:\n  - {name: \"1 X\", value: a}\n", "extraEnvs.etcd[0].name"},
		{"env twice", valid + "extraEnvs:\n  etcd:\n  - {name: X, value: a}\n  - {name: X, value: b}\n", "extraEnvs.etcd[1].name: X is set twice"},
		{"env secret", valid + "extraEnvs:\n  etcd:\n  - name: X\n    valueFrom:\n      secretKeyRef: {key: k}\n", "extraEnvs.etcd[0].valueFrom: a static pod cannot take a value from a Secret"},
		{"env value and valueFrom", valid + "extraEnvs:\n  etcd:\n  - name: X\n    value: a\n    valueFrom:\n      fieldRef: {fieldPath: status.hostIP}\n", "value and valueFrom are both set"},
		{"env empty valueFrom", valid + "extraEnvs:\n  etcd:\n  - name: X\n    valueFrom: {}\n", "must set exactly one of fieldRef and resourceFieldRef"},
		{"quantity", valid + "resources:\n  etcd:\n    requests:\n      cpu: lots\n", `resources.etcd.requests.cpu: "lots" is not a quantity`},
		{"resource name", valid + "resources:\n  etcd:\n    limits:\n      \"c p u\": \"1\"\n", "resources.etcd.limits.c p u"},
		{"request over limit", valid + "resources:\n  etcd:\n    requests: {memory: 2Gi}\n    limits: {memory: 1Gi}\n", "resources.etcd.requests.memory: 2Gi is more than its limit 1Gi"},
		{"negative", valid + "resources:\n  etcd:\n    requests: {cpu: \"-1\"}\n", "is negative"},
		{"patch target", valid + "patches:\n  files:\n  - {name: kube-vip.yaml, content: 'a: b'}\n", "patches.files[0].name: \"kube-vip.yaml\" targets kube-vip, which this node does not render"},
		{"patch unknown target", valid + "patches:\n  files:\n  - {name: kubelet.yaml, content: 'a: b'}\n", "patches.files[0].name: \"kubelet.yaml\": not a patch file"},
		{"patch kubeadm-only target", valid + "patches:\n  files:\n  - {name: kubeletconfiguration.yaml, content: 'a: b'}\n", "targets kubeletconfiguration"},
		{"patch extension", valid + "patches:\n  files:\n  - {name: etcd.yml, content: 'a: b'}\n", "the extension must be .yaml or .json"},
		{"patch type", valid + "patches:\n  files:\n  - {name: etcd+strategc.yaml, content: 'a: b'}\n", "unknown or missing patch type after '+'"},
		{"patch path", valid + "patches:\n  files:\n  - {name: ../etcd.yaml, content: 'a: b'}\n", "must be a clean relative path"},
		{"patch twice", valid + "patches:\n  files:\n  - {name: etcd.yaml, content: 'a: b'}\n  - {name: etcd.yaml, content: 'a: c'}\n", "patches.files[1].name: etcd.yaml is listed twice"},
		{"patch empty", valid + "patches:\n  files:\n  - {name: etcd.yaml, content: ''}\n", "patches.files[0].content: etcd.yaml: no patch in it"},
		{"json patch not ops", valid + "patches:\n  files:\n  - {name: etcd+json.yaml, content: 'a: b'}\n", "not a JSON patch"},
		{"merge patch not object", valid + "patches:\n  files:\n  - {name: etcd+merge.yaml, content: '[1]'}\n", "a merge patch must be an object"},
		{"patch yaml", valid + "patches:\n  files:\n  - {name: etcd.yaml, content: \"a: [\"}\n", "not YAML or JSON"},
		{"patch directory", valid + "patches:\n  directory: patches/\n", "patches.directory: must be a clean absolute path"},
	}
	for _, c := range bad {
		if _, err := Parse([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	out, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out)
	if err != nil || !reflect.DeepEqual(again, st) {
		t.Errorf("round trip: %v\n%s", err, out)
	}
}

// kubeadm's file names: target, optional suffix, optional +type, and the
// files it ignores.
func TestParsePatchName(t *testing.T) {
	for name, want := range map[string]string{
		"kube-apiserver.yaml":                 "kube-apiserver strategic",
		"kube-apiserver0+merge.yaml":          "kube-apiserver merge",
		"etcd-prod+json.json":                 "etcd json",
		"kube-scheduler+strategic.json":       "kube-scheduler strategic",
		"sub/kube-controller-manager_1.yaml":  "kube-controller-manager strategic",
		"kubeletconfiguration+strategic.yaml": "kubeletconfiguration strategic",
		"kube-apiserver.yml":                  "error",
		"README.md":                           "error",
		"kube-apiserver+.yaml":                "error",
		"kube-apiserver+jsonpatch.yaml":       "kube-apiserver json", // kubeadm's regexp is not anchored at the end
		"apiserver.yaml":                      "error",
	} {
		target, typ, err := ParsePatchName(name)
		got := target + " " + typ
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("%s: %s (%v), want %s", name, got, err, want)
		}
	}
}

// Load captures a patches directory as kubeadm reads it, and refuses a
// listed copy that no longer matches it.
func TestLoadCapturesPatchDirectory(t *testing.T) {
	dir := t.TempDir()
	patches := filepath.Join(dir, "patches")
	write := func(name, content string) {
		p := filepath.Join(patches, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("kube-scheduler+merge.yaml", "metadata:\n  labels:\n    a: b\n")
	write("kube-apiserver.yaml", "spec:\n  priority: 1\n")
	write("a/etcd+json.yaml", "- {op: add, path: /metadata/labels/x, value: y}\n")
	write("kubeletconfiguration.yaml", "x: y\n")
	write("README.md", "notes\n")
	write("etcd-empty.yaml", "")
	path := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(path, []byte(valid+"patches:\n  directory: "+patches+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range st.Patches.Files {
		names = append(names, f.Name)
	}
	if want := []string{"a/etcd+json.yaml", "kube-apiserver.yaml", "kube-scheduler+merge.yaml"}; !reflect.DeepEqual(names, want) {
		t.Errorf("captured %v, want %v", names, want)
	}
	// The journal's copy (files and directory) loads while the directory
	// is unchanged...
	out, _ := st.Marshal()
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatalf("unchanged directory: %v", err)
	}
	// ...and is refused, naming the file, once it changed.
	write("kube-apiserver.yaml", "spec:\n  priority: 2\n")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "kube-apiserver.yaml changed") {
		t.Fatalf("changed directory: %v", err)
	}
	write("etcd+bogus.yaml", "a: b\n")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "etcd+bogus.yaml") {
		t.Fatalf("bad patch type: %v", err)
	}
	if err := os.WriteFile(path, []byte(valid+"patches:\n  directory: "+filepath.Join(dir, "none")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "patches.directory") {
		t.Fatalf("missing directory: %v", err)
	}
}

// Service and pod ranges: one CIDR, or a dual-stack pair as kubeadm
// writes it.
func TestValidCIDRs(t *testing.T) {
	for in, ok := range map[string]bool{
		"10.96.0.0/12": true, "fd00:10:96::/112": true, "10.96.0.0/12,fd00:10:96::/112": true, "fd00::/64,10.0.0.0/8": true,
		"10.96.0.0/12,10.97.0.0/16": false, "fd00::/64,fd01::/64": false, "10.0.0.0/8,fd00::/64,10.1.0.0/16": false,
		"10.96.0.0/12,": false, "": false, "10.96.0.0": false,
	} {
		if err := validCIDRs(in); (err == nil) != ok {
			t.Errorf("validCIDRs(%q) = %v, want ok %v", in, err, ok)
		}
	}
}

// A valueFrom decodes strictly as its Kubernetes types: a divisor is a
// quantity, a secret's name the embedded reference's field (and then
// refused for what it is, not as an unknown field).
func TestExtraEnvValueFromDecodes(t *testing.T) {
	st, err := Parse([]byte(valid + "extraEnvs:\n  etcd:\n  - name: MEM\n    valueFrom:\n      resourceFieldRef:\n        containerName: etcd\n        resource: limits.memory\n        divisor: 1Mi\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := st.ExtraEnvs[Etcd][0].ValueFrom.ResourceFieldRef.Divisor; d.String() != "1Mi" {
		t.Errorf("divisor %s", d.String())
	}
	_, err = Parse([]byte(valid + "extraEnvs:\n  etcd:\n  - name: X\n    valueFrom:\n      secretKeyRef: {name: s, key: k}\n"))
	if err == nil || !strings.Contains(err.Error(), "cannot take a value from a Secret") {
		t.Errorf("secretKeyRef with a name: %v", err)
	}
	_, err = Parse([]byte(valid + "extraEnvs:\n  etcd:\n  - name: X\n    valueFrom:\n      fieldRef: {fieldPth: status.hostIP}\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "extraEnvs.etcd[].valueFrom.fieldRef.fieldPth"`) {
		t.Errorf("a misspelled field: %v", err)
	}
}
