package realcluster

// The images kubeadm pulls, built from the real binaries (e2e's image
// builder) and served by a distribution registry on the bridge, to which
// every node's containerd resolves registry.k8s.io (a hosts.toml under
// HostsDir): the pulls are real, the references kubeadm's own.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/e2e"
	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

// EtcdImage is the etcd kubeadm runs (ClusterConfiguration's
// etcd.local.imageTag): the 3.6 build of etcdbuild. kubeadm v1.36.3 pairs
// 3.6.8-0, which is not built here; 3.6.16 is the same minor.
const EtcdImage = "registry.k8s.io/etcd:3.6.16-0"

// To is the version the scenarios upgrade to, and EtcdImageTo its etcd:
// kubeadm v1.37.2 pairs etcd 3.7.0-0 (versions/kubeadm), not built here;
// 3.7.3 (etcdbuild) is the same minor, so the upgrade names it in a
// release file, as an operator pinning a newer patch would.
const (
	To          = "v1.37.2"
	EtcdImageTo = "registry.k8s.io/etcd:3.7.3-0"
)

// RefusingScheduler is kube-scheduler To made to fail at start: its binary
// (addflag) runs the real one with RefusedFlag added, which it refuses.
// The rollback scenario's release names it.
const (
	RefusingScheduler = "registry.k8s.io/stratum-test/kube-scheduler:" + To
	RefusedFlag       = "--refused-flag-from-the-release=1"
)

// RegistryPort is the registry's port on BridgeAddress.
const RegistryPort = 5000

// RegistryAddr is where the nodes reach the registry.
var RegistryAddr = fmt.Sprintf("%s:%d", BridgeAddress, RegistryPort)

const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Images are the images of the cluster and of its upgrade, without
// add-ons, each the real binary in one layer by kubeadm's reference: the
// control planes of Version and To, EtcdImage and EtcdImageTo, PauseImage
// (the pause program of e2e/pause), and RefusingScheduler.
func Images(ctx context.Context) ([]e2e.Image, error) {
	bins := map[string]string{}
	for _, v := range []string{Version, To} {
		paths, err := kubebuild.Binaries(ctx, v)
		if err != nil {
			return nil, err
		}
		for comp, p := range paths {
			bins[e2e.RealImage(comp, v)] = p
		}
	}
	imgs := e2e.RealImageSet(bins)
	cache, err := build.CacheDir()
	if err != nil {
		return nil, err
	}
	root, err := build.RepoRoot()
	if err != nil {
		return nil, err
	}
	pause := filepath.Join(cache, "e2e", "bin", "pause")
	if err := e2e.BuildStatic(root, "./e2e/pause", pause); err != nil {
		return nil, err
	}
	addflag := filepath.Join(cache, "e2e", "bin", "addflag")
	if err := e2e.BuildStatic(root, "./internal/harness/realcluster/addflag", addflag); err != nil {
		return nil, err
	}
	for _, e := range []struct{ minor, ref string }{{"3.6", EtcdImage}, {"3.7", EtcdImageTo}} {
		bin, err := e2e.StaticEtcd(e.minor)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, e2e.Image{
			Tags:       []string{e.ref},
			Files:      []e2e.ImageFile{{Path: "/usr/local/bin/etcd", Source: bin, Mode: 0o755}},
			Entrypoint: []string{"/usr/local/bin/etcd"},
			Env:        []string{pathEnv, e2e.ImageEnv + "=" + e.ref},
		})
	}
	return append(imgs, e2e.Image{
		Tags:       []string{PauseImage},
		Files:      []e2e.ImageFile{{Path: "/pause", Source: pause, Mode: 0o755}},
		Entrypoint: []string{"/pause"},
		Env:        []string{pathEnv, e2e.ImageEnv + "=" + PauseImage},
	}, e2e.Image{
		Tags: []string{RefusingScheduler},
		Files: []e2e.ImageFile{
			{Path: "/usr/local/bin/kube-scheduler", Source: addflag, Mode: 0o755},
			{Path: "/usr/local/bin/kube-scheduler.real", Source: bins[e2e.RealImage("kube-scheduler", To)], Mode: 0o755},
		},
		Entrypoint: []string{"/usr/local/bin/kube-scheduler"},
		Env:        []string{pathEnv, "ADD_FLAG=" + RefusedFlag, e2e.ImageEnv + "=" + RefusingScheduler},
	}), nil
}

const registryConfig = `version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`

const hostsToml = `server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`

// StartRegistry serves imgs on RegistryAddr and points every node's
// containerd at it for registry.k8s.io. The registry's storage is kept in
// the cache by the archive's digest, so a rerun with the same binaries
// pushes nothing.
func (c *Cluster) StartRegistry(ctx context.Context, imgs []e2e.Image) error {
	began := time.Now()
	regBin, push, err := e2e.RegistryPrograms(ctx)
	if err != nil {
		return err
	}
	cache, err := build.CacheDir()
	if err != nil {
		return err
	}
	archive, _, err := e2e.CachedArchive(filepath.Join(cache, "realcluster", "images"), imgs)
	if err != nil {
		return fmt.Errorf("real cluster images: %w", err)
	}
	c.timed("images archive", began)
	began = time.Now()
	key := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(archive), "images-"), ".tar")
	store := filepath.Join(cache, "realcluster", "registry-"+key)
	// Older stores hold images of binaries that changed.
	old, _ := filepath.Glob(filepath.Join(cache, "realcluster", "registry-*"))
	for _, o := range old {
		if o != store {
			_ = os.RemoveAll(o)
		}
	}
	cfg := filepath.Join(c.Dir, "registry.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, registryConfig, filepath.Join(store, "data"), RegistryAddr), 0o644); err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	log := filepath.Join(c.Dir, "registry.log")
	if c.registry, err = spawn("registry", c.Dir, log, regBin, "serve", cfg); err != nil {
		return err
	}
	err = waitFor(ctx, "the registry on "+RegistryAddr, 30*time.Second, func() (bool, error) {
		if !c.registry.alive() {
			return false, fmt.Errorf("the registry exited: %s", tail(log, 20))
		}
		resp, err := http.Get("http://" + RegistryAddr + "/v2/")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return err
	}
	c.timed("registry up", began)
	pushed := filepath.Join(store, "pushed")
	if _, err := os.Stat(pushed); err != nil {
		began = time.Now()
		for _, img := range imgs {
			for _, ref := range img.Tags {
				to := RegistryAddr + "/" + strings.TrimPrefix(ref, "registry.k8s.io/")
				pctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				out, err := exec.CommandContext(pctx, push, "-archive", archive, "-from", ref, "-to", to).CombinedOutput()
				cancel()
				if err != nil {
					return fmt.Errorf("real cluster: push %s: %w: %s", ref, err, out)
				}
			}
		}
		if err := os.WriteFile(pushed, nil, 0o644); err != nil {
			return fmt.Errorf("real cluster: %w", err)
		}
		c.timed("images pushed", began)
	}
	hosts := filepath.Join(c.HostsDir, "registry.k8s.io")
	if err := os.MkdirAll(hosts, 0o755); err != nil {
		return fmt.Errorf("real cluster: %w", err)
	}
	return os.WriteFile(filepath.Join(hosts, "hosts.toml"), fmt.Appendf(nil, hostsToml, RegistryAddr), 0o644)
}
