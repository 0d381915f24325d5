package kubeletsim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ciq/stratum-upgrade/kubeletpod"
)

// MaxManifestSize is kubelet's limit on a static pod file; larger files are
// rejected (logged) and yield no pod.
const MaxManifestSize = 10 << 20

// SourcePod is one pod as the file source yields it.
type SourcePod struct {
	// Key is namespace/name, name being metadata.name + "-" + node name.
	Key string
	// UID is metadata.uid when the file sets it, else a hash of the decoded
	// pod with kubelet's API defaults applied (kubeletpod.Defaulted), the
	// node name and File.
	UID string
	// File is the path the pod was read from.
	File string
	Pod  *corev1.Pod
}

// ErrDirectory is returned by ReadPodFile for a directory: kubelet does not
// recurse into the manifest directory.
var ErrDirectory = errors.New("is a directory: not recursing into it")

// ReadPodFile reads and decodes the static pod at path (following a
// symlink, as kubelet's os.Stat does) for node nodeName. It fails for a
// directory (ErrDirectory), a file over MaxManifestSize, bytes that do not
// decode as one v1 Pod, and a pod that fails the stand-in's validation.
func ReadPodFile(path, nodeName string) (*SourcePod, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s %w", path, ErrDirectory)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxManifestSize {
		return nil, fmt.Errorf("%s: larger than the %d-byte static pod limit", path, MaxManifestSize)
	}
	return DecodePod(b, path, nodeName)
}

// DecodePod decodes b, read from file, as a static pod for nodeName and
// computes its key and UID the way kubelet's file source does.
func DecodePod(b []byte, file, nodeName string) (*SourcePod, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &tm); err != nil {
		return nil, fmt.Errorf("%s: not a pod: %w", file, err)
	}
	if tm.APIVersion != "v1" || tm.Kind != "Pod" {
		return nil, fmt.Errorf("%s: not a pod: apiVersion %q kind %q (want v1 Pod)", file, tm.APIVersion, tm.Kind)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return nil, fmt.Errorf("%s: decode pod: %w", file, err)
	}
	if err := validate(&pod); err != nil {
		return nil, fmt.Errorf("%s: invalid pod: %w", file, err)
	}
	uid := string(pod.UID)
	if uid == "" {
		// kubelet hashes the pod with API defaults applied
		// (pkg/kubelet/config/common.go), so a field written out at its
		// default value is no change; map keys are sorted, so key order
		// and whitespace are none either.
		canon, err := json.Marshal(kubeletpod.Defaulted(&pod))
		if err != nil {
			return nil, fmt.Errorf("%s: encode pod: %w", file, err)
		}
		h := sha256.New()
		h.Write(canon)
		fmt.Fprintf(h, "host:%s", nodeName)
		fmt.Fprintf(h, "file:%s", file)
		uid = hex.EncodeToString(h.Sum(nil)[:16])
	}
	ns := pod.Namespace
	if ns == "" {
		ns = "default"
	}
	return &SourcePod{
		Key:  ns + "/" + pod.Name + "-" + strings.ToLower(nodeName),
		UID:  uid,
		File: file,
		Pod:  &pod,
	}, nil
}

// validate is the part of kubelet's pod validation the stand-in needs to
// run a pod at all.
func validate(p *corev1.Pod) error {
	if p.Name == "" {
		return errors.New("metadata.name is required")
	}
	if len(p.Spec.Containers) == 0 {
		return errors.New("spec.containers: at least one container is required")
	}
	seen := map[string]bool{}
	for i, c := range p.Spec.Containers {
		switch {
		case c.Name == "":
			return fmt.Errorf("spec.containers[%d].name is required", i)
		case seen[c.Name]:
			return fmt.Errorf("spec.containers[%d].name: duplicate %q", i, c.Name)
		case c.Image == "":
			return fmt.Errorf("spec.containers[%d].image is required", i)
		}
		seen[c.Name] = true
	}
	return nil
}

// ListDir is kubelet's listing of the manifest directory: every entry
// matching dir/[^.]* (hidden names excluded), sorted byte-wise by full path.
func ListDir(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "[^.]*"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	sort.Strings(paths)
	return paths, nil
}

// hidden reports whether a path's base name is hidden, which kubelet
// ignores in listings and in inotify events.
func hidden(path string) bool { return strings.HasPrefix(filepath.Base(path), ".") }
