// Command registry is the CNCF distribution registry's own command
// (github.com/distribution/distribution/v3/cmd/registry) with only the
// filesystem storage driver: the end-to-end tests' registry on loopback
// needs no cloud storage, proxy or auth, and leaving out the Azure, GCS and
// S3 drivers makes the cold build a fraction of the upstream command's.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// As upstream: the commands exit non-zero themselves on failure.
	_ = registry.RootCmd.Execute()
}
