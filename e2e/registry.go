package e2e

// The image registry on loopback: the CNCF distribution registry and a
// pusher (go-containerregistry), both built from the tool module
// internal/harness/tools/registry; images pushed to it from a
// docker-archive, never imported into containerd, so that containerd has
// them only once it pulls them.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/standin"
	"github.com/ciq/stratum-upgrade/internal/harness/testbed"
)

// RegistryHost is the registry name the registry images carry. containerd
// reaches it at the loopback port of the run through a hosts.toml under
// its config_path (containerdConfig), so an image's reference and its
// ImageEnv do not depend on the port and its archive is cached once.
const RegistryHost = "stratum-e2e.registry"

// RegistryVersion is the distribution registry the tool module builds.
const RegistryVersion = "v3.0.0"

// registryTools are the registry and the pusher, each built once into the
// cache (build.Tool).
func registryTools() ([]build.Tool, error) {
	root, err := build.RepoRoot()
	if err != nil {
		return nil, err
	}
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	mod := filepath.Join(root, "internal", "harness", "tools", "registry")
	return []build.Tool{{
		// The upstream command with only the filesystem storage driver.
		Name: "distribution registry " + RegistryVersion, Dir: filepath.Join(cache, "registry-"+RegistryVersion+"-fs"), ModuleDir: mod,
		Packages: []string{"./registry"}, Binaries: []string{"registry"},
		Version: RegistryVersion, Timeout: 20 * time.Minute,
	}, {
		Name: "registry push", Dir: filepath.Join(cache, "registry-push-v0.22.1"), ModuleDir: mod,
		Packages: []string{"./push"}, Binaries: []string{"push"},
		Version: "go-containerregistry v0.22.1", VersionArgs: map[string][]string{"push": {"-version"}}, Timeout: 20 * time.Minute,
	}}, nil
}

// RegistryImage is a stand-in component's image in the registry, healthy.
func RegistryImage(component, tag string) string {
	return RegistryHost + "/" + component + ":" + tag
}

// RegistryImageSet is the stand-in components at tags, under
// RegistryImage's references (ImageEnv each its own).
func RegistryImageSet(b *Binaries, tags ...string) []Image {
	var imgs []Image
	for _, comp := range StandinComponents {
		bin := "/usr/local/bin/" + comp
		for _, tag := range tags {
			ref := RegistryImage(comp, tag)
			imgs = append(imgs, Image{
				Tags:       []string{ref},
				Files:      []ImageFile{{Path: bin, Source: b.Standin, Mode: 0o755}},
				Entrypoint: []string{bin},
				Env:        []string{imagePath, standin.EnvMode + "=" + string(standin.ModeHealthy), ImageEnv + "=" + ref},
			})
		}
	}
	return imgs
}

// RegistryPrograms returns the paths of the registry and the pusher,
// building them first if the cache lacks them: for a registry that is not
// a Host's (internal/harness/realcluster serves one on its bridge).
func RegistryPrograms(ctx context.Context) (registry, push string, err error) {
	tools, err := registryTools()
	if err != nil {
		return "", "", err
	}
	for _, t := range tools {
		if _, err := t.Build(ctx); err != nil {
			return "", "", err
		}
	}
	return tools[0].Paths()["registry"], tools[1].Paths()["push"], nil
}

// Registry is a running distribution registry on a loopback port.
type Registry struct {
	Addr    string // 127.0.0.1:PORT
	Log     string
	push    string
	archive string
	d       *daemon
}

const registryConfig = `version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`

// hostsToml points containerd's RegistryHost at the registry over plain
// HTTP (containerd's config_path hosts directory format).
const hostsToml = `server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`

// StartRegistry builds the tools if the cache lacks them, writes the
// archive of imgs, starts the registry under the Host's root on a free
// loopback port, waits until it answers /v2/, and points the Host's
// containerd at it.
func (h *Host) StartRegistry(ctx context.Context, imgs []Image) (*Registry, error) {
	tools, err := registryTools()
	if err != nil {
		return nil, err
	}
	for _, t := range tools {
		if _, err := t.Build(ctx); err != nil {
			return nil, err
		}
	}
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	archive, _, err := CachedArchive(filepath.Join(cache, "e2e", "registry-images"), imgs)
	if err != nil {
		return nil, fmt.Errorf("registry images: %w", err)
	}
	ports, err := testbed.FreePorts(1)
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), Log: filepath.Join(h.Root, "registry.log"),
		push: tools[1].Paths()["push"], archive: archive}
	dir := filepath.Join(h.Root, "registry")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, registryConfig, filepath.Join(dir, "data"), r.Addr), 0o644); err != nil {
		return nil, err
	}
	hosts := filepath.Join(h.Root, "containerd", "certs.d", RegistryHost)
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(hosts, "hosts.toml"), fmt.Appendf(nil, hostsToml, r.Addr), 0o644); err != nil {
		return nil, err
	}
	if r.d, err = h.spawn("registry", r.Log, tools[0].Paths()["registry"], "serve", cfg); err != nil {
		return nil, err
	}
	err = waitUntil(ctx, "the registry to answer http://"+r.Addr+"/v2/", 30*time.Second, func() (bool, error) {
		if !r.d.alive() {
			return false, fmt.Errorf("the registry exited: %s", tailFile(r.Log, 20))
		}
		resp, err := http.Get("http://" + r.Addr + "/v2/")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// Push copies the archive's image ref to the registry as the same
// repository and tag, or as tag when it is set.
func (r *Registry) Push(ctx context.Context, ref, tag string) error {
	repoTag := strings.TrimPrefix(ref, RegistryHost+"/")
	if tag != "" {
		repoTag = repoTag[:strings.LastIndex(repoTag, ":")+1] + tag
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, r.push, "-archive", r.archive, "-from", ref, "-to", r.Addr+"/"+repoTag).CombinedOutput()
	if err != nil {
		return fmt.Errorf("push %s: %w: %s", ref, err, out)
	}
	return nil
}

// Stop stops the registry by PID (SIGTERM, SIGKILL after 10 s).
func (r *Registry) Stop() {
	if r.d != nil {
		r.d.stop(10 * time.Second)
	}
}
