package kubeletsim

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/yaml"
)

// Image is what the stand-in knows of one image reference: the program a
// container of that image runs, and the image's ENV layer.
type Image struct {
	// Binary is the absolute path of the program executed for a container
	// of this image. The process's argv[0] is still the container's
	// command[0], as on a node.
	Binary string `json:"binary"`
	// Env is the image's ENV: the container's environment is Env overlaid
	// by the pod's env, plus the runtime's PATH, HOSTNAME and HOME where
	// neither sets them, and nothing else.
	Env map[string]string `json:"env,omitempty"`
	// Entrypoint is the image's ENTRYPOINT, used as the argv head when the
	// container has no command. Empty means [Binary].
	Entrypoint []string `json:"entrypoint,omitempty"`
}

// ImageMap maps image references, exactly as a pod spells them, to Images.
type ImageMap map[string]Image

// LoadImageMap reads an image map file (YAML or JSON: reference -> Image).
// Every entry must name an absolute Binary. The file is read on every
// container start, so it may be rewritten while the stand-in runs.
func LoadImageMap(path string) (ImageMap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image map: %w", err)
	}
	var m ImageMap
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		return nil, fmt.Errorf("image map %s: %w", path, err)
	}
	for _, ref := range m.refs() {
		if !filepath.IsAbs(m[ref].Binary) {
			return nil, fmt.Errorf("image map %s: %s: binary must be an absolute path, got %q", path, ref, m[ref].Binary)
		}
	}
	return m, nil
}

// Save writes m to path as YAML (not atomically: the stand-in only reads it
// when starting a container, and callers write it before that).
func (m ImageMap) Save(path string) error {
	b, err := yaml.Marshal(m)
	if err != nil {
		return fmt.Errorf("image map: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("image map: %w", err)
	}
	return nil
}

func (m ImageMap) refs() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
