package nodestate

import (
	"strings"
	"testing"
)

// unpinned is a node state that pins no image but kube-vip's.
const unpinned = `apiVersion: stratum.ciq.com/v1
kind: NodeState
nodeName: cp-1
advertiseAddress: 10.0.0.11
kubernetesVersion: v1.36.3
`

// TestImageRepositoryRefusals: the node state's own checks of
// imageRepository and pins (resolve's tests cover the images it names).
func TestImageRepositoryRefusals(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"a repository with a tag", unpinned + "imageRepository: registry.k8s.io/kube:v1\n", `imageRepository: must be an image repository without tag or digest`},
		{"a repository with a trailing slash", unpinned + "imageRepository: registry.k8s.io/\n", `imageRepository: must be an image repository`},
		{"upper case", unpinned + "imageRepository: Registry.example.com\n", `imageRepository: must be an image repository`},
		{"an empty pin", unpinned + "images:\n  kube-apiserver: \"\"\n", "images.kube-apiserver: empty: pin an image reference, or leave kube-apiserver out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
}
