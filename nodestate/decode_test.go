package nodestate

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDecodeStrictErrors pins the operator's text of every decoding failure:
// the line, the field path, a suggestion or what is wrong.
func TestDecodeStrictErrors(t *testing.T) {
	good, err := os.ReadFile("../testdata/states/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(good)
	line := func(prefix string) int {
		for i, l := range strings.Split(doc, "\n") {
			if strings.HasPrefix(l, prefix) {
				return i + 1
			}
		}
		t.Fatalf("default.yaml has no line %q", prefix)
		return 0
	}
	itoa := strconv.Itoa
	for _, tc := range []struct {
		label, doc, want string
	}{
		{"typo", strings.Replace(doc, "nodeName:", "nodname:", 1),
			"line " + itoa(line("nodeName:")) + `: unknown field "nodname" (did you mean "nodeName"?)`},
		{"nested typo", strings.Replace(doc, "  dataDir:", "  datadir2:", 1),
			"line " + itoa(line("  dataDir:")) + `: unknown field "etcd.datadir2" (did you mean "dataDir"?)`},
		{"no close field", strings.Replace(doc, "nodeName:", "zzzzzzzz:", 1),
			"line " + itoa(line("nodeName:")) + `: unknown field "zzzzzzzz" (known here: apiVersion, kind, nodeName, advertiseAddress, kubernetesVersion, imageRepository, images, versions, etcd, vip, profile, pkiDir, kubeconfigDir, configDir, caCertDirs, networking, ports, extraArgs, extraArgsOrder, stopped, adoptedInputs, extraVolumes, extraEnvs, resources, patches)`},
		{"a release", "apiVersion: stratum.ciq.com/v1\nkind: Release\nkubernetesVersion: v1.34.5\n",
			"line 2: kind: Release: this file is a release, not a node state"},
		{"another kind", "apiVersion: v1\nkind: Pod\n", `line 2: kind: must be NodeState, got "Pod"`},
		{"second document", doc + "---\n# the next one\nnodeName: cp-2\n",
			"line " + itoa(strings.Count(doc, "\n")+1) + ": a second YAML document starts here; the file must hold one NodeState only (split it into files)"},
		{"list for a mapping", "kind: NodeState\nimages:\n  - x\n",
			"line 2: images: want a mapping (field: value lines), got a list"},
		{"text for a port", "kind: NodeState\nports:\n  apiServer: six\n", `line 3: ports.apiServer: want a whole number, got "six"`},
		{"syntax", "kind: NodeState\nimages: {a: 1\n", "line 1: did not find expected ',' or '}'"},
		{"not a mapping", "- a\n- b\n", "line 1: want the fields of a NodeState (apiVersion, kind, ...), got a list"},
		{"empty", "\n# nothing\n", "empty document"},
	} {
		t.Run(tc.label, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Parse: %v\nwant %s", err, tc.want)
			}
		})
	}
	var ke *KindError
	if _, err := Parse([]byte("kind: Release\n")); !errors.As(err, &ke) || ke.Got != "Release" || ke.Want != Kind {
		t.Errorf("Parse of a release: %v, want a *KindError", err)
	}
	// An empty second document ("---" at the end, or only comments) is no
	// second document.
	if _, err := Parse([]byte(doc + "---\n# nothing more\n")); err != nil {
		t.Errorf("Parse with an empty second document: %v", err)
	}
}

func TestClosest(t *testing.T) {
	for _, tc := range []struct{ s, want string }{
		{"image", "images"}, {"Images", "images"}, {"kubernetesversion", "kubernetesVersion"}, {"nothinglikeit", ""},
	} {
		if got := closest(tc.s, []string{"images", "kubernetesVersion", "versions"}); got != tc.want {
			t.Errorf("closest(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
}
