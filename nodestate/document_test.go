package nodestate

import (
	"reflect"
	"strings"
	"testing"
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
		text := "\n" + string(b)
		order := []string{"apiVersion", "kind", "nodeName", "advertiseAddress", "kubernetesVersion", "images", "versions", "etcd", "profile", "pkiDir", "kubeconfigDir", "configDir", "networking", "ports", "extraArgs"}
		last := -1
		for _, f := range order {
			key := "\n" + f + ":"
			if name == "json" {
				key = "\"" + f + "\":"
			}
			i := strings.Index(text, key)
			if i < 0 || i < last {
				t.Errorf("%s: field %s missing or out of the reference's order:\n%s", name, f, text)
			}
			last = i
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
