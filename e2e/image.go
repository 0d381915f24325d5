package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ImageFile is one file of an image's single layer.
type ImageFile struct {
	// Path is the file's absolute path inside the image ("/usr/local/bin/etcd").
	Path string
	// Source is the host file whose bytes it holds.
	Source string
	// Mode is its permission bits (0755 for a binary).
	Mode int64
}

// Image is one image of a docker-archive: a single layer holding Files (and
// their parent directories), a config with Entrypoint and Env, and the
// references it is tagged with.
type Image struct {
	Tags       []string
	Files      []ImageFile
	Entrypoint []string
	Env        []string
}

// epoch is the modification time of every entry: the archive's bytes depend
// only on the files' contents and the specs.
var epoch = time.Unix(0, 0).UTC()

// dockerManifest is one entry of a docker-archive's manifest.json.
type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Env        []string `json:"Env,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

// WriteArchive writes images as one docker-archive (the `docker save`
// format that `ctr images import` reads): manifest.json, one config JSON
// and one uncompressed layer tar per image, identical layers stored once.
// The file is written to a temporary name beside path and renamed, so path
// is either absent or complete. The bytes depend only on the inputs.
func WriteArchive(dst string, images []Image) error {
	tmp := fmt.Sprintf("%s.%d.tmp", dst, os.Getpid())
	if err := writeArchive(tmp, images); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image archive %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image archive %s: %w", dst, err)
	}
	return nil
}

func writeArchive(dst string, images []Image) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	written := map[string]bool{}
	var manifests []dockerManifest
	for _, img := range images {
		if len(img.Tags) == 0 {
			return fmt.Errorf("an image with files %v has no tag", img.Files)
		}
		layer, err := layerTar(img.Files)
		if err != nil {
			return fmt.Errorf("%s: %w", img.Tags[0], err)
		}
		sum := sha256.Sum256(layer)
		diffID := hex.EncodeToString(sum[:])
		layerName := diffID + "/layer.tar"
		if !written[layerName] {
			if err := put(layerName, layer); err != nil {
				return err
			}
			written[layerName] = true
		}
		var cfg imageConfig
		cfg.Architecture, cfg.OS, cfg.Created = "amd64", "linux", epoch.Format(time.RFC3339)
		cfg.Config.Entrypoint, cfg.Config.Env = img.Entrypoint, img.Env
		cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{"sha256:" + diffID}
		cfg.History = append(cfg.History, struct {
			Created   string `json:"created"`
			CreatedBy string `json:"created_by"`
		}{cfg.Created, "stratum-upgrade e2e image builder"})
		cb, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		csum := sha256.Sum256(cb)
		cfgName := hex.EncodeToString(csum[:]) + ".json"
		if !written[cfgName] {
			if err := put(cfgName, cb); err != nil {
				return err
			}
			written[cfgName] = true
		}
		manifests = append(manifests, dockerManifest{Config: cfgName, RepoTags: img.Tags, Layers: []string{layerName}})
	}
	mb, err := json.Marshal(manifests)
	if err != nil {
		return err
	}
	if err := put("manifest.json", mb); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// layerTar is the layer holding files, each parent directory first (0755),
// plus /tmp (1777), in a fixed order.
func layerTar(files []ImageFile) ([]byte, error) {
	dirs := map[string]bool{"tmp/": true}
	for _, fl := range files {
		p := strings.TrimPrefix(path.Clean(fl.Path), "/")
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	names := make([]string, 0, len(dirs))
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range names {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: mode, ModTime: epoch, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	sorted := append([]ImageFile(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, fl := range sorted {
		src, err := os.Open(fl.Source)
		if err != nil {
			return nil, err
		}
		fi, err := src.Stat()
		if err != nil {
			src.Close()
			return nil, err
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(path.Clean(fl.Path), "/"), Mode: fl.Mode, Size: fi.Size(), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			src.Close()
			return nil, err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fl.Source, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// archiveKey is a digest of everything an archive's bytes depend on: each
// image's spec and the contents of its files.
func archiveKey(images []Image) (string, error) {
	h := sha256.New()
	digests := map[string]string{}
	for _, img := range images {
		spec := struct {
			Tags, Entrypoint, Env []string
			Files                 []string
		}{img.Tags, img.Entrypoint, img.Env, nil}
		for _, fl := range img.Files {
			d, ok := digests[fl.Source]
			if !ok {
				var err error
				if d, err = fileDigest(fl.Source); err != nil {
					return "", err
				}
				digests[fl.Source] = d
			}
			spec.Files = append(spec.Files, fmt.Sprintf("%s %o %s", fl.Path, fl.Mode, d))
		}
		b, _ := json.Marshal(spec)
		h.Write(b)
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// CachedArchive returns a docker-archive of images under dir, named after
// a digest of the images' specs and file contents: an archive already
// there is reused, otherwise it is written (WriteArchive) and the other
// archives in dir are removed. written reports whether this call wrote it.
func CachedArchive(dir string, images []Image) (path string, written bool, err error) {
	key, err := archiveKey(images)
	if err != nil {
		return "", false, fmt.Errorf("image archive: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("image archive: %w", err)
	}
	dst := filepath.Join(dir, "images-"+key+".tar")
	if _, err := os.Stat(dst); err == nil {
		return dst, false, nil
	}
	if err := WriteArchive(dst, images); err != nil {
		return "", false, err
	}
	// Older archives are of binaries or specs that changed: drop them.
	old, _ := filepath.Glob(filepath.Join(dir, "images-*.tar"))
	for _, o := range old {
		if o != dst {
			os.Remove(o)
		}
	}
	return dst, true, nil
}
