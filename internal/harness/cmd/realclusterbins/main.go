// Command realclusterbins builds what make real-cluster runs
// (realcluster.Tools: the control plane, kubeadm and kubelet of
// realcluster.Version) into the cache, printing each build's time (0 when
// cached), so the test's own timeout does not include them.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ciq/stratum-upgrade/internal/harness/realcluster"
)

func main() {
	tools, err := realcluster.Tools()
	if err != nil {
		fmt.Fprintln(os.Stderr, "realclusterbins:", err)
		os.Exit(1)
	}
	total := time.Now()
	for _, t := range tools {
		began := time.Now()
		built, err := t.Build(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "realclusterbins:", err)
			os.Exit(1)
		}
		how := "cached"
		if built {
			how = "built"
		}
		fmt.Printf("%-22s %-6s %7.1fs  %s\n", t.Name, how, time.Since(began).Seconds(), t.Dir)
	}
	fmt.Printf("%-22s %-6s %7.1fs\n", "total", "", time.Since(total).Seconds())
}
