// Command kubeadmfixtures writes every kubeadm fixture,
// testdata/kubeadm/<version>/<configuration>/ for each of
// kubebuild.KubeadmVersions (every supported minor, the kubeadm-only ones
// included) and kubeadmgen.Configs, from the real kubeadm and
// kubelet code of that version (kubeadmgen.WriteFixture), building the
// programs first if the cache lacks them; it prints how long each took.
// Each fixture is written beside its old one and renamed over it, so an
// interrupted run leaves each fixture old or new, never half written. make
// kubeadm-fixtures runs it, as root (kubeadm --rootfs chroots).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/kubeadmgen"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: kubeadmfixtures [-versions V,...]   (writes testdata/kubeadm/<version>/<configuration>/ for every configuration)")
		flag.PrintDefaults()
	}
	only := flag.String("versions", strings.Join(kubebuild.KubeadmVersions(), ","), "the Kubernetes versions to write the fixtures of, comma-separated")
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	versions := strings.Split(*only, ",")
	for _, v := range versions {
		if !slices.Contains(kubebuild.KubeadmVersions(), v) {
			fail(fmt.Errorf("-versions: %q is no kubeadm version (known: %s)", v, strings.Join(kubebuild.KubeadmVersions(), ", ")))
		}
	}
	ctx := context.Background()
	total := time.Now()
	for _, v := range versions {
		began := time.Now()
		built, err := kubebuild.KubeadmBinaries(ctx, v)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%-28s %7.1fs  %s\n", "kubeadm "+v+" (build)", time.Since(began).Seconds(), filepath.Dir(built["kubeadm"]))
		for _, c := range kubeadmgen.Configs {
			began := time.Now()
			dir, err := kubeadmgen.FixtureDir(v, c.Name)
			if err != nil {
				fail(err)
			}
			if err := replace(ctx, v, c.Name, dir); err != nil {
				fail(err)
			}
			fmt.Printf("%-28s %7.1fs  %s\n", v+" "+c.Name, time.Since(began).Seconds(), dir)
		}
	}
	fmt.Printf("%-28s %7.1fs\n", "total", time.Since(total).Seconds())
}

// replace writes the fixture into a sibling directory, then moves it over
// dir.
func replace(ctx context.Context, version, name, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(dir), "."+name+".new")
	old := filepath.Join(filepath.Dir(dir), "."+name+".old")
	for _, d := range []string{tmp, old} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	if err := kubeadmgen.WriteFixture(ctx, version, name, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(dir, old); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kubeadmfixtures:", err)
	os.Exit(1)
}
