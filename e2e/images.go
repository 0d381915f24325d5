package e2e

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ciq/stratum-upgrade/internal/harness/build"

	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
	"github.com/ciq/stratum-upgrade/nodestate"
)

// ImageEnv is set in every image's ENV to the image's own reference, so a
// running container's process says which image it runs
// (/proc/<pid>/environ): the check that a rolled-back node runs the old
// images again.
const ImageEnv = "STRATUM_E2E_IMAGE"

// EnvProbeImage runs the pause program from an image with no ENV;
// EnvProbeImage+"-home" has only HOME=/from-image.
const EnvProbeImage = "registry.k8s.io/e2e-env-probe:1"

// imagePath is the PATH of every image; the renderer's commands are bare
// names ("etcd", "kube-apiserver") resolved in it, as in the real images.
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// StandinComponents are the components the component stand-in plays in the
// end-to-end node (no kube-vip: the node has no VIP).
var StandinComponents = []string{nodestate.KubeAPIServer, nodestate.ControllerManager, nodestate.Scheduler}

// Binaries are the programs the images hold.
type Binaries struct {
	Pause, Standin string
	// Etcd maps an etcd image reference to its static binary.
	Etcd map[string]string
}

// BuildBinaries builds the pause program and the component stand-in
// (CGO_ENABLED=0, into <cache>/e2e/bin) and finds static builds of both
// etcds.
func BuildBinaries() (*Binaries, error) {
	root, err := build.RepoRoot()
	if err != nil {
		return nil, err
	}
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	b := &Binaries{Pause: filepath.Join(cache, "e2e", "bin", "pause"), Standin: filepath.Join(cache, "e2e", "bin", "component-standin"), Etcd: map[string]string{}}
	if err := BuildStatic(root, "./e2e/pause", b.Pause); err != nil {
		return nil, err
	}
	if err := BuildStatic(root, "./internal/harness/cmd/component-standin", b.Standin); err != nil {
		return nil, err
	}
	for _, eb := range etcdbuild.Builds {
		p, err := StaticEtcd(eb.Minor)
		if err != nil {
			return nil, err
		}
		b.Etcd[eb.Image] = p
	}
	return b, nil
}

// ImageSet is every image the end-to-end node can run: the pause image;
// each stand-in component at every testbed.KubeTags tag in every
// standin.Modes mode under testbed.ModeImage's reference (the image's ENV
// sets STANDIN_MODE, as the test bed's image map does); and both etcds
// under their kubeadm references. Each carries ImageEnv.
func ImageSet(b *Binaries) []Image {
	imgs := []Image{{
		Tags:       []string{SandboxImage},
		Files:      []ImageFile{{Path: "/pause", Source: b.Pause, Mode: 0o755}},
		Entrypoint: []string{"/pause"},
		Env:        []string{imagePath, ImageEnv + "=" + SandboxImage},
	}, {
		// The pause program with no ENV at all: what the runtime adds to a
		// container's environment on its own.
		Tags:       []string{EnvProbeImage},
		Files:      []ImageFile{{Path: "/pause", Source: b.Pause, Mode: 0o755}},
		Entrypoint: []string{"/pause"},
	}, {
		Tags:       []string{EnvProbeImage + "-home"},
		Files:      []ImageFile{{Path: "/pause", Source: b.Pause, Mode: 0o755}},
		Entrypoint: []string{"/pause"},
		Env:        []string{"HOME=/from-image"},
	}}
	for _, comp := range StandinComponents {
		bin := "/usr/local/bin/" + comp
		for _, tag := range testbed.KubeTags {
			for _, mode := range standin.Modes {
				ref := testbed.ModeImage(comp, tag, mode)
				imgs = append(imgs, Image{
					Tags:       []string{ref},
					Files:      []ImageFile{{Path: bin, Source: b.Standin, Mode: 0o755}},
					Entrypoint: []string{bin},
					Env:        []string{imagePath, standin.EnvMode + "=" + string(mode), ImageEnv + "=" + ref},
				})
			}
		}
	}
	for _, eb := range etcdbuild.Builds {
		imgs = append(imgs, Image{
			Tags:       []string{eb.Image},
			Files:      []ImageFile{{Path: "/usr/local/bin/etcd", Source: b.Etcd[eb.Image], Mode: 0o755}},
			Entrypoint: []string{"/usr/local/bin/etcd"},
			Env:        []string{imagePath, ImageEnv + "=" + eb.Image},
		})
	}
	return imgs
}

// BuildImages builds the binaries and returns a docker-archive of ImageSet,
// cached under <cache>/e2e/images (rewritten only when a binary or a spec
// changed). written reports whether this call wrote it.
func BuildImages() (archive string, written bool, err error) {
	b, err := BuildBinaries()
	if err != nil {
		return "", false, err
	}
	cache, err := CacheDir()
	if err != nil {
		return "", false, err
	}
	archive, written, err = CachedArchive(filepath.Join(cache, "e2e", "images"), ImageSet(b))
	if err != nil {
		return "", false, fmt.Errorf("e2e images: %w", err)
	}
	return archive, written, nil
}

// RealImage is the reference of the real component's image at a
// kubebuild.Versions version, as registry.k8s.io names it
// ("registry.k8s.io/kube-apiserver:v1.36.3").
func RealImage(component, version string) string {
	return testbed.Repos[component] + ":" + version
}

// RealBinaries returns the real kube-apiserver, kube-controller-manager and
// kube-scheduler of every kubebuild.Versions version by their image
// reference (RealImage), building a version first if the cache lacks it
// (kubebuild.Binaries: minutes each from a cold build cache, nothing when
// cached). kubebuild builds with CGO_ENABLED=0; each binary is checked to
// be static, since its image holds nothing else.
func RealBinaries(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range kubebuild.Versions {
		paths, err := kubebuild.Binaries(ctx, v)
		if err != nil {
			return nil, err
		}
		for comp, p := range paths {
			static, err := IsStatic(p)
			if err != nil {
				return nil, err
			}
			if !static {
				return nil, fmt.Errorf("%s %s at %s is dynamically linked: an image of one binary cannot run it", comp, v, p)
			}
			out[RealImage(comp, v)] = p
		}
	}
	return out, nil
}

// RealImageSet is an image per entry of bins (RealBinaries: reference ->
// binary), sorted by reference: the binary at /usr/local/bin/<component>,
// PATH set (the renderer's command is the bare name, as in the real
// images), ImageEnv its reference, and no STANDIN_MODE.
func RealImageSet(bins map[string]string) []Image {
	refs := make([]string, 0, len(bins))
	for ref := range bins {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	imgs := make([]Image, 0, len(refs))
	for _, ref := range refs {
		repo, _, _ := strings.Cut(ref, ":")
		bin := "/usr/local/bin/" + path.Base(repo)
		imgs = append(imgs, Image{
			Tags:       []string{ref},
			Files:      []ImageFile{{Path: bin, Source: bins[ref], Mode: 0o755}},
			Entrypoint: []string{bin},
			Env:        []string{imagePath, ImageEnv + "=" + ref},
		})
	}
	return imgs
}

// BuildRealImages returns a docker-archive of RealImageSet, cached under
// <cache>/e2e/real-images apart from BuildImages' archive: its six images
// are about 560 MB, so only the scenarios that run them import it
// (Host.Import), and a change to the stand-in does not rewrite it.
func BuildRealImages(ctx context.Context) (archive string, written bool, err error) {
	bins, err := RealBinaries(ctx)
	if err != nil {
		return "", false, err
	}
	cache, err := CacheDir()
	if err != nil {
		return "", false, err
	}
	archive, written, err = CachedArchive(filepath.Join(cache, "e2e", "real-images"), RealImageSet(bins))
	if err != nil {
		return "", false, fmt.Errorf("e2e real images: %w", err)
	}
	return archive, written, nil
}
