package manifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/durable"
)

// ErrShadowed is wrapped by CheckShadows when a stray file in the manifest
// directory is a pod kubelet would run in place of a component's.
var ErrShadowed = errors.New("a stray file shadows a component's pod")

// ShadowError is the stray File in manifest directory Dir that kubelet
// runs in place of Component's pod; it wraps ErrShadowed. Its message
// names the command that moves the stray out of the directory.
type ShadowError struct {
	File, Dir, Component string
}

func (e *ShadowError) Error() string {
	return fmt.Sprintf("%v: %s in the manifest directory is a pod named %s/%s: kubelet runs it instead of %s at every relist and would undo any change to it; move it out of %s (`mv %s /root/`) and try again",
		ErrShadowed, e.File, metav1.NamespaceSystem, e.Component, FileName(e.Component), e.Dir, shellWord(filepath.Join(e.Dir, e.File)))
}

func (e *ShadowError) Unwrap() error { return ErrShadowed }

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// CheckShadows refuses a visible file in the manifest directory that is a
// pod with the same namespace and name as a roster component's: kubelet
// runs whichever file sorts last at every relist, so an upgrade would
// commit and then be undone by that file (an operator's "kube-apiserver.yaml.bak").
// A surge copy is checked too: written by WriteSurge its pod name differs,
// so it shadows nothing, but one edited to the component's name would.
func (s *Store) CheckShadows(roster []string) error {
	return s.checkShadows(roster, false)
}

// CheckShadowsAfterSweep is CheckShadows of the directory as a Sweep
// leaves it: a staging leftover it removes shadows nothing.
func (s *Store) CheckShadowsAfterSweep(roster []string) error {
	return s.checkShadows(roster, true)
}

func (s *Store) checkShadows(roster []string, swept bool) error {
	strays, err := s.Strays()
	if err != nil {
		return err
	}
	surges, err := s.SurgeFiles()
	if err != nil {
		return err
	}
	for _, f := range append(strays, surges...) {
		if leftover, _ := IsStagingLeftover(f); leftover && swept {
			if fi, err := os.Lstat(filepath.Join(s.Dir(), f)); err == nil && fi.Mode().IsRegular() {
				continue
			}
		}
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
				return &ShadowError{File: f, Dir: s.Dir(), Component: comp}
			}
		}
	}
	return nil
}
