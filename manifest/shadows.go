package manifest

import (
	"errors"
	"fmt"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/durable"
)

// ErrShadowed is wrapped by CheckShadows when a stray file in the manifest
// directory is a pod kubelet would run in place of a component's.
var ErrShadowed = errors.New("a stray file shadows a component's pod")

// CheckShadows refuses a visible file in the manifest directory that is a
// pod with the same namespace and name as a roster component's: kubelet
// runs whichever file sorts last at every relist, so an upgrade would
// commit and then be undone by that file (an operator's "kube-apiserver.yaml.bak").
func (s *Store) CheckShadows(roster []string) error {
	strays, err := s.Strays()
	if err != nil {
		return err
	}
	for _, f := range strays {
		b, _, err := durable.ReadRegular(filepath.Join(s.Dir(), f))
		if err != nil || len(b) > 10<<20 {
			continue // a directory, a link kubelet follows to garbage, or too big for kubelet: not a pod it runs
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if yaml.Unmarshal(b, &head) != nil || head.Kind != "Pod" {
			continue
		}
		for _, comp := range roster {
			if head.Metadata.Name == comp && head.Metadata.Namespace == metav1.NamespaceSystem {
				return fmt.Errorf("%w: %s in the manifest directory is a pod named %s/%s: kubelet runs it instead of %s at every relist and would undo the upgrade; move it out of %s and try again",
					ErrShadowed, f, head.Metadata.Namespace, comp, FileName(comp), s.Dir())
			}
		}
	}
	return nil
}
