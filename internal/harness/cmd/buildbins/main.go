// Command buildbins builds every real binary the test bed can run, each
// etcd of etcdbuild.Builds and the Kubernetes control plane of each
// kubebuild.Versions, and each version's kubeadm (kubebuild.KubeadmTool,
// for the kubeadm fixtures' check), into the cache (build.CacheDir),
// printing how long each took; a build already cached takes no time. make
// real-binaries runs it.
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
	if *kubeadm {
		for _, v := range kubebuild.Versions {
			t, err := kubebuild.KubeadmTool(v)
			if err != nil {
				fail(err)
			}
			tools = append(tools, t)
		}
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
