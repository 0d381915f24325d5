// Command stratum-upgrade owns a Kubernetes control-plane node's static pod
// manifest directory and upgrades the manifests as a journaled transaction
// with rollback and crash resume. See docs/cli.md and docs/operations.md.
package main

import (
	"os"

	"github.com/ciq/stratum-upgrade/internal/cli"
)

func main() {
	os.Exit(run())
}

func run() int { return cli.Main(os.Args[1:], os.Stdout, os.Stderr) }
