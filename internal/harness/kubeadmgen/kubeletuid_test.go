package kubeadmgen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

// TestRealKubeletUIDDefaulting pins kubelet's rule for a static pod's UID on
// the real kubelet code of each version (kubeletuid), on the defaults
// fixture's kube-apiserver.yaml: the UID is the hash of the decoded pod
// with kubelet's defaults applied, then the node name and the file's
// path. So what only spells the same pod differently (the order of YAML
// keys, a default written out or left out) keeps the UID, and kubelet
// does not restart the pod; any change of meaning (a flag, the order of
// the command's arguments, an annotation), another node or another path
// changes it.
func TestRealKubeletUIDDefaulting(t *testing.T) {
	for _, v := range kubebuild.KubeadmVersions() {
		t.Run(v, func(t *testing.T) {
			needKubeadm(t, v)
			fixture, err := FixtureDir(v, "defaults")
			if err != nil {
				t.Fatal(err)
			}
			const file = "kube-apiserver.yaml"
			orig, err := os.ReadFile(filepath.Join(fixture, ManifestsDir, file))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(fixture, UIDsFile))
			if err != nil {
				t.Fatal(err)
			}
			var pinned map[string]PodUID
			if err := json.Unmarshal(b, &pinned); err != nil {
				t.Fatal(err)
			}
			want := pinned[file]
			if want.UID == "" || want.Name != "kube-apiserver-cp-1" {
				t.Fatalf("%s: %s's entry %+v", UIDsFile, file, want)
			}
			// uid is the UID kubeletuid computes for body as file at
			// ManifestDir on node.
			uid := func(body []byte, node string) string {
				t.Helper()
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, file), body, 0o600); err != nil {
					t.Fatal(err)
				}
				pods, _, err := KubeletUIDs(t.Context(), v, dir, node)
				if err != nil {
					t.Fatal(err)
				}
				return pods[file].UID
			}
			if got := uid(orig, "cp-1"); got != want.UID {
				t.Fatalf("the unchanged fixture: UID %s, %s pins %s", got, UIDsFile, want.UID)
			}
			same := []struct {
				name   string
				mutate func(pod *yaml.Node)
			}{
				{"re-encoded", func(*yaml.Node) {}},
				{"every mapping's keys reversed", reverseKeys},
				{"ports' protocol: TCP left out", func(p *yaml.Node) { del(container(p).get("ports").items(0), "protocol") }},
				{"imagePullPolicy: IfNotPresent left out (a tagged image's default)", func(p *yaml.Node) { del(container(p).Node, "imagePullPolicy") }},
				{"status: {} left out", func(p *yaml.Node) { del(p, "status") }},
				{"terminationMessagePath and -Policy written out", func(p *yaml.Node) {
					set(container(p).Node, "terminationMessagePath", "/dev/termination-log")
					set(container(p).Node, "terminationMessagePolicy", "File")
				}},
				{"restartPolicy, dnsPolicy, terminationGracePeriodSeconds, schedulerName written out", func(p *yaml.Node) {
					spec := node{p}.get("spec").Node
					set(spec, "restartPolicy", "Always")
					set(spec, "dnsPolicy", "ClusterFirst")
					set(spec, "terminationGracePeriodSeconds", "30")
					set(spec, "schedulerName", "default-scheduler")
				}},
				{"enableServiceLinks: true written out", func(p *yaml.Node) { set(node{p}.get("spec").Node, "enableServiceLinks", "true") }},
				{"probes' successThreshold: 1 written out", func(p *yaml.Node) {
					for _, pr := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
						set(container(p).get(pr).Node, "successThreshold", "1")
					}
				}},
			}
			for _, c := range same {
				if got := uid(mutated(t, orig, c.mutate), "cp-1"); got != want.UID {
					t.Errorf("%s: UID %s, want the unchanged file's %s: kubelet would restart the pod", c.name, got, want.UID)
				}
			}
			differ := []struct {
				name   string
				mutate func(pod *yaml.Node)
			}{
				{"a flag added", func(p *yaml.Node) { appendItem(container(p).get("command").Node, "--profiling=false") }},
				{"a flag's value changed", func(p *yaml.Node) { container(p).get("command").items(1).Value = "--advertise-address=10.0.0.12" }},
				{"two flags swapped", func(p *yaml.Node) {
					cmd := container(p).get("command").Node
					cmd.Content[1], cmd.Content[2] = cmd.Content[2], cmd.Content[1]
				}},
				{"an annotation added", func(p *yaml.Node) { set(node{p}.get("metadata").get("annotations").Node, "example.com/note", "x") }},
				{"a probe's port by number instead of by name", func(p *yaml.Node) {
					port := container(p).get("livenessProbe").get("httpGet").get("port")
					port.Value, port.Tag = "6443", "!!int"
				}},
			}
			for _, c := range differ {
				if got := uid(mutated(t, orig, c.mutate), "cp-1"); got == want.UID {
					t.Errorf("%s: UID unchanged %s: kubelet would not restart the pod", c.name, got)
				}
			}
			if got := uid(orig, "cp-2"); got == want.UID {
				t.Errorf("another node name: UID unchanged %s", got)
			}
			// Another path: the same bytes read where they are, not at
			// ManifestDir.
			bins, err := kubebuild.KubeadmBinaries(t.Context(), v)
			if err != nil {
				t.Fatal(err)
			}
			out, err := output(t.Context(), bins["kubeletuid"], "-node", "cp-1", filepath.Join(fixture, ManifestsDir))
			if err != nil {
				t.Fatal(err)
			}
			var there map[string]PodUID
			if err := json.Unmarshal(out, &there); err != nil {
				t.Fatal(err)
			}
			if there[file].UID == "" || there[file].UID == want.UID {
				t.Errorf("another path: UID %q, want one other than %s", there[file].UID, want.UID)
			}
		})
	}
}

// mutated is body decoded, changed by mutate and encoded again.
func mutated(t *testing.T, body []byte, mutate func(pod *yaml.Node)) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	mutate(doc.Content[0])
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(out, body) {
		// Not a failure in itself, but then the case tests nothing.
		t.Logf("a mutation left the bytes as they were")
	}
	return out
}

// node navigates a YAML tree; a missing key or index panics, which in a
// test is a failure naming the line.
type node struct{ *yaml.Node }

func (n node) get(key string) node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return node{n.Content[i+1]}
		}
	}
	panic("no key " + key)
}

func (n node) items(i int) *yaml.Node { return n.Content[i] }

// container is the pod's one container.
func container(pod *yaml.Node) node { return node{node{pod}.get("spec").get("containers").items(0)} }

// set adds key: value (a plain scalar, so YAML types it) to mapping m.
func set(m *yaml.Node, key, value string) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
}

func del(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
	panic("no key " + key)
}

func appendItem(seq *yaml.Node, value string) {
	seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
}

// reverseKeys reverses the order of the keys of every mapping under n.
func reverseKeys(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		var pairs [][2]*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			pairs = append(pairs, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
		}
		slices.Reverse(pairs)
		n.Content = n.Content[:0]
		for _, p := range pairs {
			n.Content = append(n.Content, p[0], p[1])
		}
	}
	for _, c := range n.Content {
		reverseKeys(c)
	}
}
