package kubeletsim

import (
	"strings"
	"testing"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	for in, want := range map[string]string{
		"$(A)":         "x",
		"$(A)$(A)":     "xx",
		"$$(A)":        "$(A)",
		"$$$(A)":       "$x",
		"$(B)":         "$(B)",
		"$(EMPTY)-":    "-",
		"$A":           "$A",
		"$(A":          "$(A",
		"a$":           "a$",
		"no vars":      "no vars",
		"--f=$(A),$$":  "--f=x,$",
		"$()":          "$()",
		"pre$(A)post$": "prexpost$",
	} {
		if got := Expand(in, lookup); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDecodePodUID(t *testing.T) {
	base := podYAML(podOpts{name: "etcd", annotations: map[string]string{"a": "1"}})
	uid := func(content, file, nodeName string) string {
		t.Helper()
		sp, err := DecodePod([]byte(content), file, nodeName)
		if err != nil {
			t.Fatal(err)
		}
		return sp.UID
	}
	u0 := uid(base, "/m/etcd.yaml", "n1")
	if u := uid("\n# comment\n"+base+"\n\n", "/m/etcd.yaml", "n1"); u != u0 {
		t.Errorf("whitespace and comments changed the UID")
	}
	// A field written out at its API default is the same pod to kubelet.
	if u := uid(strings.Replace(base, "spec:\n", "spec:\n  restartPolicy: Always\n", 1), "/m/etcd.yaml", "n1"); u != u0 {
		t.Errorf("restartPolicy: Always (the default) written out changed the UID")
	}
	for name, u := range map[string]string{
		"restart policy": uid(strings.Replace(base, "spec:\n", "spec:\n  restartPolicy: Never\n", 1), "/m/etcd.yaml", "n1"),
		"annotation":     uid(podYAML(podOpts{name: "etcd", annotations: map[string]string{"a": "2"}}), "/m/etcd.yaml", "n1"),
		"file path":      uid(base, "/m/etcd.yaml.bak", "n1"),
		"node name":      uid(base, "/m/etcd.yaml", "n2"),
	} {
		if u == u0 {
			t.Errorf("a change of %s kept the UID", name)
		}
	}
	withUID := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  uid: fixed\nspec:\n  containers:\n  - name: etcd\n    image: x\n"
	sp, err := DecodePod([]byte(withUID), "/m/a", "Node-A")
	if err != nil {
		t.Fatal(err)
	}
	if sp.UID != "fixed" || sp.Key != "default/etcd-node-a" {
		t.Errorf("uid %q key %q, want fixed and default/etcd-node-a", sp.UID, sp.Key)
	}
	for name, bad := range map[string]string{
		"not yaml":       "{{{",
		"not a pod":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
		"no containers":  "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec: {}\n",
		"no name":        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: b\n",
		"plain text":     "hello\n",
		"wrong api type": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [x]\n",
	} {
		if _, err := DecodePod([]byte(bad), "/m/f", "n"); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}
