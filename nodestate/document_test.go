package nodestate

import (
	"reflect"
	"strings"
	"testing"

	yamlv3 "go.yaml.in/yaml/v3"
)

// YAML and JSON keep the reference's field order and parse back to the
// same state; a string that reads as a number or a boolean stays a string.
func TestDocumentRoundTrip(t *testing.T) {
	st, err := Parse([]byte(valid + "versions:\n  etcd: \"3.5.35\"\nextraArgs:\n  kube-apiserver:\n    enable-admission-plugins: \"true\"\n    service-account-issuer: [a, b]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, enc := range map[string]func() ([]byte, error){"yaml": st.YAML, "json": st.JSON} {
		b, err := enc()
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		// The top-level keys, in the document's order.
		var doc yamlv3.Node
		if err := yamlv3.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var keys []string
		for i, k := range doc.Content[0].Content {
			if i%2 == 0 {
				keys = append(keys, k.Value)
			}
		}
		order := []string{"apiVersion", "kind", "nodeName", "advertiseAddress", "kubernetesVersion", "images", "versions", "etcd", "profile", "pkiDir", "kubeconfigDir", "configDir", "networking", "ports", "extraArgs"}
		if !reflect.DeepEqual(keys, order) {
			t.Errorf("%s: top-level fields %v, want the reference's order %v", name, keys, order)
		}
		back, err := Parse(b)
		if err != nil {
			t.Fatalf("%s: Parse: %v\n%s", name, err, text)
		}
		if !reflect.DeepEqual(back, st) {
			t.Errorf("%s: parsed back differs:\n%+v\n%+v", name, back, st)
		}
	}
	y, _ := st.YAML()
	if !strings.Contains(string(y), "enable-admission-plugins: \"true\"") || strings.Contains(string(y), "{") {
		t.Errorf("YAML quotes or flows wrongly:\n%s", y)
	}
}
