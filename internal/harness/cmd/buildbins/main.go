// Command buildbins builds every real binary the test bed can run, each
// etcd of etcdbuild.Builds and the Kubernetes control plane of each
// kubebuild.Versions, and each of those versions' kubeadm
// (kubebuild.KubeadmTool, for the kubeadm fixtures' check), into the cache
// (build.CacheDir), printing how long each took; a build already cached
// takes no time. make real-binaries runs it. The kubeadm of the
// kubeadm-only minors (kubebuild.KubeadmOnlyVersions) is built only with
// -kubeadm-only-minors: it shares no package with a control-plane build,
// so it costs minutes from a cold build cache, which CI does not spend
// (make kubeadm-fixtures builds them when it needs them).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/build"
	"github.com/ciq/stratum-upgrade/internal/harness/etcdbuild"
	"github.com/ciq/stratum-upgrade/internal/harness/kubebuild"
)

func main() {
	etcd := flag.Bool("etcd", true, "build every etcd")
	kube := flag.Bool("kube", true, "build every Kubernetes version")
	kubeadm := flag.Bool("kubeadm", true, "build every Kubernetes version's kubeadm, kubeletuid and kubeadmetcd")
	kubeadmOnly := flag.Bool("kubeadm-only-minors", false, "build the kubeadm, kubeletuid and kubeadmetcd of the minors whose control plane is not built (kubebuild.KubeadmOnlyVersions)")
	flag.Parse()
	var tools []build.Tool
	if *etcd {
		for _, b := range etcdbuild.Builds {
			t, err := b.Tool()
			if err != nil {
				fail(err)
			}
			tools = append(tools, t)
		}
	}
	if *kube {
		for _, v := range kubebuild.Versions {
			t, err := kubebuild.Tool(v)
			if err != nil {
				fail(err)
			}
			tools = append(tools, t)
		}
	}
	var kubeadms []string
	if *kubeadmOnly {
		kubeadms = append(kubeadms, kubebuild.KubeadmOnlyVersions...)
	}
	if *kubeadm {
		kubeadms = append(kubeadms, kubebuild.Versions...)
	}
	for _, v := range kubeadms {
		t, err := kubebuild.KubeadmTool(v)
		if err != nil {
			fail(err)
		}
		tools = append(tools, t)
	}
	total := time.Now()
	for _, t := range tools {
		began := time.Now()
		built, err := t.Build(context.Background())
		if err != nil {
			fail(err)
		}
		how := "cached"
		if built {
			how = "built"
		}
		fmt.Printf("%-22s %-6s %7.1fs  %s\n", t.Name, how, time.Since(began).Seconds(), t.Dir)
	}
	fmt.Printf("%-22s %-6s %7.1fs\n", "total", "", time.Since(total).Seconds())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "buildbins:", err)
	os.Exit(1)
}
