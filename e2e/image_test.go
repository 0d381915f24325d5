package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// readTar returns every regular file of the tar at path.
func readTar(t *testing.T, path string) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readTarFrom(t, f)
}

func readTarFrom(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, hdrs := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := hdrs[h.Name]; dup {
			t.Errorf("entry %s twice", h.Name)
		}
		hdrs[h.Name] = h
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	return files, hdrs
}

// TestWriteArchive: two images sharing a binary make one layer and two
// configs; manifest.json tags them; each config's diff_id is the layer's
// sha256; the layer holds the binary at its path with its mode and parent
// directories; the same inputs give the same bytes.
func TestWriteArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	imgs := []Image{
		{Tags: []string{"registry.k8s.io/kube-scheduler:v1.34.4"}, Files: []ImageFile{{Path: "/usr/local/bin/kube-scheduler", Source: bin, Mode: 0o755}}, Entrypoint: []string{"/usr/local/bin/kube-scheduler"}, Env: []string{"A=1"}},
		{Tags: []string{"registry.k8s.io/kube-scheduler:v1.34.5-never-listen"}, Files: []ImageFile{{Path: "/usr/local/bin/kube-scheduler", Source: bin, Mode: 0o755}}, Env: []string{"STANDIN_MODE=never-listen"}},
	}
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	for _, p := range []string{a, b} {
		if err := WriteArchive(p, imgs); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("the same images gave different archives")
	}
	files, _ := readTar(t, a)
	var man []dockerManifest
	if err := json.Unmarshal(files["manifest.json"], &man); err != nil {
		t.Fatal(err)
	}
	if len(man) != 2 || man[0].RepoTags[0] != imgs[0].Tags[0] || man[1].RepoTags[0] != imgs[1].Tags[0] {
		t.Fatalf("manifest.json: %+v", man)
	}
	if man[0].Layers[0] != man[1].Layers[0] || man[0].Config == man[1].Config {
		t.Fatalf("want one shared layer and two configs: %+v", man)
	}
	layer := files[man[0].Layers[0]]
	sum := sha256.Sum256(layer)
	for i, m := range man {
		var cfg imageConfig
		if err := json.Unmarshal(files[m.Config], &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Errorf("image %d diff_id %s is not the layer's digest", i, cfg.RootFS.DiffIDs[0])
		}
		if cfg.OS != "linux" || cfg.Architecture != "amd64" || cfg.Config.Env[0] != imgs[i].Env[0] {
			t.Errorf("image %d config: %+v", i, cfg)
		}
	}
	lf, lh := readTarFrom(t, bytes.NewReader(layer))
	if string(lf["usr/local/bin/kube-scheduler"]) != "#!binary" || lh["usr/local/bin/kube-scheduler"].Mode != 0o755 {
		t.Errorf("layer entries: %v", lh)
	}
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/", "tmp/"} {
		if h, ok := lh[d]; !ok || h.Typeflag != tar.TypeDir {
			t.Errorf("layer lacks directory %s", d)
		}
	}
}

// TestCachedArchive: the same images reuse the archive; a changed binary
// writes a new one and removes the old.
func TestCachedArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	os.WriteFile(bin, []byte("v1"), 0o755)
	imgs := []Image{{Tags: []string{"x:1"}, Files: []ImageFile{{Path: "/x", Source: bin, Mode: 0o755}}}}
	p1, w1, err := CachedArchive(filepath.Join(dir, "c"), imgs)
	if err != nil || !w1 {
		t.Fatalf("first: %s %v %v", p1, w1, err)
	}
	p2, w2, err := CachedArchive(filepath.Join(dir, "c"), imgs)
	if err != nil || w2 || p2 != p1 {
		t.Fatalf("second: %s %v %v; want %s reused", p2, w2, err, p1)
	}
	os.WriteFile(bin, []byte("v2"), 0o755)
	p3, w3, err := CachedArchive(filepath.Join(dir, "c"), imgs)
	if err != nil || !w3 || p3 == p1 {
		t.Fatalf("after a change: %s %v %v", p3, w3, err)
	}
	if _, err := os.Stat(p1); !os.IsNotExist(err) {
		t.Errorf("old archive %s not removed", p1)
	}
}

// TestRealImageSet: each real binary is its registry.k8s.io reference's
// image, at /usr/local/bin/<component>, PATH and ImageEnv set, no stand-in
// mode.
func TestRealImageSet(t *testing.T) {
	bins := map[string]string{
		RealImage("kube-scheduler", "v1.37.2"): "/b/sched",
		RealImage("kube-apiserver", "v1.36.3"): "/b/api",
	}
	imgs := RealImageSet(bins)
	if len(imgs) != 2 {
		t.Fatalf("%d images, want 2", len(imgs))
	}
	api := imgs[0]
	if got := api.Tags; len(got) != 1 || got[0] != "registry.k8s.io/kube-apiserver:v1.36.3" {
		t.Errorf("tags %v", got)
	}
	if len(api.Files) != 1 || api.Files[0].Path != "/usr/local/bin/kube-apiserver" || api.Files[0].Source != "/b/api" {
		t.Errorf("files %+v", api.Files)
	}
	if len(api.Entrypoint) != 1 || api.Entrypoint[0] != "/usr/local/bin/kube-apiserver" {
		t.Errorf("entrypoint %v", api.Entrypoint)
	}
	want := []string{imagePath, ImageEnv + "=registry.k8s.io/kube-apiserver:v1.36.3"}
	if len(api.Env) != 2 || api.Env[0] != want[0] || api.Env[1] != want[1] {
		t.Errorf("env %v, want %v", api.Env, want)
	}
	if imgs[1].Files[0].Path != "/usr/local/bin/kube-scheduler" {
		t.Errorf("scheduler at %s", imgs[1].Files[0].Path)
	}
}
