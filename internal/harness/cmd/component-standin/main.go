// Command component-standin stands in for kube-apiserver,
// kube-controller-manager, kube-scheduler and kube-vip; run it with argv[0]
// set to the component's name (or STANDIN_COMPONENT). See package
// internal/harness/standin for the flags, endpoints and STANDIN_MODE behaviours.
package main

import (
	"os"

	"github.com/ciq/stratum-upgrade/internal/harness/standin"
)

func main() { os.Exit(standin.Main(os.Args)) }
